// The client link's transport (docs/protocol.md, "Client link"): one WebSocket at a time, its
// state said in words, reconnects with a capped backoff, and every frame decoded into one shape.
//
// Why the care: a deployed API sits behind API Gateway, which closes a connection idle for
// 10 minutes (1001 "Going away") and any connection after 2 hours, and a ticketed API takes a
// connect ticket that opens ONE connection. A browser is told nothing when a handshake is
// refused (403): it sees close code 1006 with no reason, so the page has to say what it means.

export const AUDIO_FRAME = 0xa1; // first byte of a binary audio frame (protocol v1)
export const HEADER_BYTES = 9; // 0xA1, turn uint32 BE, seq uint32 BE, then PCM s16le
export const MAX_TRIES = 6; // reconnect attempts after a drop, then give up and say so

// What each close code means here, in words a person can act on.
const CLOSE_MEANING = {
  1000: "closed by the server",
  1001: "going away: API Gateway closes a connection idle for 10 minutes, and any after 2 hours",
  1003: "the server refused a binary frame",
  1005: "closed without a code",
  1006: "the connection dropped, or the server refused it",
  1007: "the server got text that is not UTF-8",
  1008: "closed by the server's policy",
  1009: "a message was too large (frames up to 32 KB, messages up to 128 KB)",
  1011: "the server failed",
  1012: "the server is restarting",
  1013: "the server is busy; try again later",
};

// Said once when binary audio frames turn out to arrive as text frames (see binaryArrivedAsText).
export const TEXT_FRAMES_LINE =
  "This API delivers binary audio frames as text frames, which the browser refuses (it " +
  "failed the connection): switched to base64 audio, reconnected and asked again.";

const TICKET_HELP =
  "Each connect ticket opens one connection and expires after 2 minutes: get a new one " +
  "(POST /tickets, or agent-infra token), paste it in Ticket and press Connect.";

/** The URL to open: the one given, with the ticket and the audio delivery as query parameters
 * (browsers cannot set WebSocket headers, so the ticket travels as ?token=). Throws an Error
 * that says what is wrong with a URL that is not ws:// or wss://. */
export function connectUrl(url, token = "", base64 = false) {
  let parsed;
  try {
    parsed = new URL(String(url).trim());
  } catch {
    throw new Error(`"${url}" is not a URL; the API's is ws://host/ws or wss://…/stage`);
  }
  if (parsed.protocol !== "ws:" && parsed.protocol !== "wss:") {
    throw new Error(`"${url}" is not a WebSocket URL: it must start with ws:// or wss://`);
  }
  if (token && token.trim()) parsed.searchParams.set("token", token.trim());
  if (base64) parsed.searchParams.set("audio", "base64");
  return parsed.href;
}

/** The ticket a URL carries (pasted with ?token=, or added from the Ticket field), or "". */
export function ticketOf(href) {
  try {
    return new URL(href).searchParams.get("token") || "";
  } catch {
    return "";
  }
}

/** The URL without its ticket, to show on the page (a ticket is a credential, if a short one). */
export function shownUrl(href) {
  try {
    const parsed = new URL(href);
    if (!parsed.searchParams.has("token")) return parsed.href;
    parsed.searchParams.delete("token");
    return `${parsed.href} with a ticket`;
  } catch {
    return href;
  }
}

/** Milliseconds to wait before reconnect attempt `attempt` (0-based): 0.5 s doubling to a 15 s
 * cap, with up to 20% jitter so that many pages dropped at once do not come back at once. */
export function backoffDelay(attempt, random = Math.random) {
  const base = Math.min(15000, 500 * 2 ** attempt);
  return Math.round(base * (0.8 + 0.2 * random()));
}

/** One sentence on why a connection closed, and what to do about it.
 * opened: the connection had opened (false: the handshake failed); ticket: one was used. */
export function explainClose(code, reason, { opened, ticket }) {
  const said = reason ? ` "${reason}"` : "";
  if (!opened && code === 1006) {
    return ticket
      ? `refused (1006): the connect ticket may be used up or expired. ${TICKET_HELP}`
      : "could not connect (1006): the server refused the connection or cannot be reached. " +
          "Check the URL; if the API needs a connect ticket, paste one in Ticket.";
  }
  const meaning = CLOSE_MEANING[code] || "closed";
  return `closed (${code}${said}): ${meaning}`;
}

/** Did this close come from binary audio delivered as a *text* frame? A gateway that posts raw
 * bytes as text (whether API Gateway does is undocumented: docs/protocol.md) turns the 0xA1 of
 * an audio frame into a text frame that is not UTF-8, and the browser fails the connection.
 * The spec's code is 1007; Chromium (checked with 156) fires an error event and then closes
 * with 1006, wasClean false ("Could not decode a text frame as UTF-8" in the console only),
 * while a plain drop closes with 1006 and no error event. So: the connection had opened, a
 * turn_start announced binary audio (or named no delivery, as APIs before it did), no binary
 * audio frame has arrived on this connection (once one has, the API delivers binary), and it
 * closed with 1007, or with 1006 after an error event. */
export function binaryArrivedAsText(code, { opened, failed, awaitingBinary, binarySeen }) {
  if (!opened || !awaitingBinary || binarySeen) return false;
  return code === 1007 || (code === 1006 && failed);
}

/** Decode one WebSocket message: a binary audio frame, a base64 audio text frame
 * (?audio=base64) or a JSON control frame. Audio comes back as
 * {type: "audio", turn, seq, pcm: DataView of s16le samples}. */
export function decodeFrame(data) {
  if (data instanceof ArrayBuffer) {
    const view = new DataView(data);
    if (data.byteLength < HEADER_BYTES || view.getUint8(0) !== AUDIO_FRAME) {
      return { type: "unreadable", detail: "a binary frame that is not audio" };
    }
    return {
      type: "audio",
      turn: view.getUint32(1), // big-endian by default
      seq: view.getUint32(5),
      pcm: new DataView(data, HEADER_BYTES), // a view: no copy, alignment does not matter
    };
  }
  let frame;
  try {
    frame = JSON.parse(data);
  } catch {
    return { type: "unreadable", detail: "a text frame that is not JSON" };
  }
  if (frame && frame.type === "audio" && typeof frame.data === "string") {
    const raw = atob(frame.data);
    const bytes = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    return { type: "audio", turn: frame.turn, seq: frame.seq, pcm: new DataView(bytes.buffer) };
  }
  return frame;
}

/** The connection: open it, say its state, reconnect after a drop, send JSON actions.
 *
 * settings(): {url, token, base64}, read from the page at each attempt, so a ticket pasted
 *   after a drop is the one the next attempt uses.
 * onState({state, text}): state is "connecting", "open", "reconnecting", "closed" or "error".
 * onFrame(frame): every decoded frame.  onOpen(): each time a connection opens.
 * onTextFrames(): binary audio arrived as text frames (binaryArrivedAsText); called before the
 *   link reconnects at once, so that settings() asks for base64 from then on. */
export class Link {
  constructor({ settings, onState, onFrame, onOpen, onTextFrames }) {
    this.settings = settings;
    this.onState = onState;
    this.onFrame = onFrame;
    this.onOpen = onOpen;
    this.onTextFrames = onTextFrames;
    this.socket = null;
    this.tries = 0;
    this.timer = null;
    this.usedTickets = new Set(); // a ticket opens one connection: never offer it twice
    this.lastClose = "";
  }

  get isOpen() {
    return this.socket !== null && this.socket.readyState === WebSocket.OPEN;
  }

  /** A person pressed Connect: start over, whatever the state. */
  connect() {
    this.close();
    this.tries = 0;
    this.open();
  }

  /** A person pressed Disconnect (or the page reconnects): no reconnect follows. */
  close() {
    clearTimeout(this.timer);
    this.timer = null;
    const socket = this.socket;
    this.socket = null; // its close event is no longer ours
    if (socket) socket.close(1000, "closed by the user");
  }

  /** Send an action; false when there is no open connection to send it on. */
  send(message) {
    if (!this.isOpen) return false;
    this.socket.send(JSON.stringify(message));
    return true;
  }

  open() {
    const { url, token, base64 } = this.settings();
    let href;
    let socket;
    try {
      href = connectUrl(url, token, base64);
      socket = new WebSocket(href);
    } catch (error) {
      this.say("error", `error: ${error.message}`);
      return;
    }
    const ticket = ticketOf(href);
    socket.binaryType = "arraybuffer";
    this.socket = socket;
    let opened = false;
    // What tells binary frames delivered as text from a plain drop (binaryArrivedAsText).
    const delivery = { failed: false, awaitingBinary: false, binarySeen: false };
    this.say(
      this.tries ? "reconnecting" : "connecting",
      this.tries
        ? `${this.lastClose}; reconnecting to ${shownUrl(href)} ` +
            `(try ${this.tries} of ${MAX_TRIES})…`
        : `connecting to ${shownUrl(href)}…`,
    );
    socket.onopen = () => {
      if (socket !== this.socket) return;
      opened = true;
      this.tries = 0;
      if (ticket) this.usedTickets.add(ticket);
      this.say("open", `connected to ${shownUrl(href)}`);
      this.onOpen();
    };
    socket.onmessage = (event) => {
      if (socket !== this.socket) return;
      const frame = decodeFrame(event.data);
      if (frame.type === "audio" && event.data instanceof ArrayBuffer) delivery.binarySeen = true;
      if (frame.type === "turn_start") {
        delivery.awaitingBinary = (frame.audio?.delivery ?? "binary") === "binary";
      }
      if (frame.type === "turn_end") delivery.awaitingBinary = false;
      this.onFrame(frame);
    };
    socket.onerror = () => {
      if (opened) delivery.failed = true; // the browser failed an open connection
    };
    socket.onclose = (event) => {
      if (socket !== this.socket) return; // one we closed ourselves, or replaced
      this.socket = null;
      const asText = binaryArrivedAsText(event.code, { opened, ...delivery });
      this.closed(event.code, event.reason, opened, ticket, asText);
    };
  }

  closed(code, reason, opened, ticket, asText = false) {
    if (asText) {
      this.textFramesClosed(code, ticket);
      return;
    }
    const why = explainClose(code, reason, { opened, ticket: Boolean(ticket) });
    if (!opened && this.tries === 0) {
      // The first attempt failed: a wrong URL or a refused ticket; retrying would not help.
      this.say("error", why);
      return;
    }
    if (opened && code === 1000) {
      this.say("closed", `${why}. Press Connect to connect again.`);
      return;
    }
    if (ticket && !opened) this.usedTickets.add(ticket); // refused: spent or expired
    const nextTicket = ticketOf(connectUrlOrEmpty(this.settings()));
    if (ticket && (!nextTicket || this.usedTickets.has(nextTicket))) {
      // A ticketed API: the ticket used is spent, and the page cannot mint one (no secret in a
      // page). Say so instead of knocking again with it.
      this.say(
        "closed",
        opened ? `${why}. To reconnect, this API needs a fresh ticket. ${TICKET_HELP}` : why,
      );
      return;
    }
    if (this.tries >= MAX_TRIES) {
      this.say("error", `${why}. Gave up after ${MAX_TRIES} tries; press Connect to try again.`);
      return;
    }
    const delay = backoffDelay(this.tries);
    this.tries += 1;
    this.lastClose = why; // said again while the next attempt connects
    this.say(
      "reconnecting",
      `${why}; reconnecting in ${(delay / 1000).toFixed(1)} s (try ${this.tries} of ${MAX_TRIES})`,
    );
    this.timer = setTimeout(() => this.open(), delay);
  }

  /** Binary audio arrived as text frames: the app switches to base64, and the link reconnects
   * at once (nothing to wait out: the API is fine, only the frame type was wrong). */
  textFramesClosed(code, ticket) {
    this.onTextFrames();
    const why = `binary audio arrived as text frames (${code})`;
    const nextTicket = ticketOf(connectUrlOrEmpty(this.settings()));
    if (ticket && (!nextTicket || this.usedTickets.has(nextTicket))) {
      this.say("closed", `${why}. To reconnect, this API needs a fresh ticket. ${TICKET_HELP}`);
      return;
    }
    this.tries = 0;
    this.lastClose = why;
    this.open();
  }

  say(state, text) {
    this.onState({ state, text });
  }
}

function connectUrlOrEmpty({ url, token, base64 }) {
  try {
    return connectUrl(url, token, base64);
  } catch {
    return "";
  }
}
