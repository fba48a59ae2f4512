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
 * onFrame(frame): every decoded frame.  onOpen(): each time a connection opens. */
export class Link {
  constructor({ settings, onState, onFrame, onOpen }) {
    this.settings = settings;
    this.onState = onState;
    this.onFrame = onFrame;
    this.onOpen = onOpen;
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
      this.say("open", "open");
      this.onOpen();
    };
    socket.onmessage = (event) => {
      if (socket === this.socket) this.onFrame(decodeFrame(event.data));
    };
    socket.onclose = (event) => {
      if (socket !== this.socket) return; // one we closed ourselves, or replaced
      this.socket = null;
      this.closed(event.code, event.reason, opened, ticket);
    };
  }

  closed(code, reason, opened, ticket) {
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
