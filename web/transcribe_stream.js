// Amazon Transcribe streaming, spoken to from the page (docs/protocol.md, "Speech in").
//
// `listen` answers with a presigned URL of Transcribe's streaming WebSocket API (on the local
// stack, its own endpoint, which checks the URL as AWS does). Each WebSocket message, both
// ways, is one message of AWS's event-stream encoding (Transcribe developer guide, "Event
// stream encoding"), all integers big-endian:
//
//   total length uint32 | headers length uint32 | prelude CRC32 (of the 8 bytes before it)
//   headers: name length uint8, name (UTF-8), value type uint8 (7: string), then the value
//            (a string: length uint16, UTF-8)
//   payload | message CRC32 (of every byte before it)
//
// Out: AudioEvent messages (:content-type application/octet-stream, :event-type AudioEvent,
// :message-type event) carrying signed 16-bit little-endian mono PCM at the offer's rate, 100 ms
// each; an empty one ends the stream. In: TranscriptEvent messages (JSON), or one exception
// message (:message-type exception, :exception-type, {"Message": ...}) before a close. The
// Python side of the same encoding is voicewire/speech_in/transcribe_events.py; the browser
// tests check each against the other, byte for byte.

// --- CRC32 ---------------------------------------------------------------------------------
//
// The event-stream encoding needs the CRC32 of zlib and Ethernet (reflected, polynomial
// 0xEDB88320). Browsers offer none (crypto.subtle has only cryptographic digests) and the page
// loads no library (no build step, nothing from elsewhere: its Content-Security-Policy allows
// only its own files), so here is the classic table-driven one: 256 entries, one byte a step.

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/** The CRC32 of bytes (a Uint8Array), as zlib.crc32 computes it. */
export function crc32(bytes) {
  let crc = 0xffffffff;
  for (let i = 0; i < bytes.length; i++) crc = CRC_TABLE[(crc ^ bytes[i]) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

// --- messages ------------------------------------------------------------------------------

export const PRELUDE_BYTES = 12; // total length, headers length, prelude CRC
export const OVERHEAD_BYTES = 16; // the prelude and the message CRC
const STRING = 7; // a header value type: a string, uint16 length then UTF-8
const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

/** A frame that is not one well-formed event-stream message; the message says what is wrong. */
export class EventStreamError extends Error {}

/** One message: headers (an object, in its order; string values), payload (bytes). An
 * ArrayBuffer, ready for WebSocket.send. */
export function encodeMessage(headers, payload = new Uint8Array(0)) {
  const body = payload instanceof Uint8Array ? payload : new Uint8Array(payload);
  const parts = [];
  let headersLength = 0;
  for (const [name, value] of Object.entries(headers)) {
    const nameBytes = encoder.encode(name);
    const valueBytes = encoder.encode(String(value));
    if (nameBytes.length > 255 || valueBytes.length > 0xffff) {
      throw new EventStreamError(`the header ${name} is too long for the event-stream encoding`);
    }
    const header = new Uint8Array(1 + nameBytes.length + 3 + valueBytes.length);
    const view = new DataView(header.buffer);
    header[0] = nameBytes.length;
    header.set(nameBytes, 1);
    header[1 + nameBytes.length] = STRING;
    view.setUint16(2 + nameBytes.length, valueBytes.length); // big-endian
    header.set(valueBytes, 4 + nameBytes.length);
    parts.push(header);
    headersLength += header.length;
  }
  const total = OVERHEAD_BYTES + headersLength + body.length;
  const message = new Uint8Array(total);
  const view = new DataView(message.buffer);
  view.setUint32(0, total);
  view.setUint32(4, headersLength);
  view.setUint32(8, crc32(message.subarray(0, 8)));
  let at = PRELUDE_BYTES;
  for (const part of parts) {
    message.set(part, at);
    at += part.length;
  }
  message.set(body, at);
  view.setUint32(total - 4, crc32(message.subarray(0, total - 4)));
  return message.buffer;
}

// The headers of an AudioEvent, in the order Transcribe's guide lists them (and the Python
// encoder writes them: the bytes are the same).
const AUDIO_HEADERS = Object.freeze({
  ":content-type": "application/octet-stream",
  ":event-type": "AudioEvent",
  ":message-type": "event",
});

/** An AudioEvent carrying pcm (bytes); an empty one ends the stream. */
export function audioEvent(pcm = new Uint8Array(0)) {
  return encodeMessage(AUDIO_HEADERS, pcm);
}

/** The one message a frame carries: {headers: {name: value}, payload: Uint8Array}. Throws an
 * EventStreamError for a frame that is short, longer or shorter than its prelude says, whose
 * CRCs do not match, or whose headers cannot be read. */
export function decodeMessage(frame) {
  const bytes = frame instanceof Uint8Array ? frame : new Uint8Array(frame);
  if (bytes.length < OVERHEAD_BYTES) {
    throw new EventStreamError(
      `a frame of ${bytes.length} bytes is shorter than an event-stream message's ` +
        `${OVERHEAD_BYTES} bytes of prelude and CRC`,
    );
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const total = view.getUint32(0);
  const headersLength = view.getUint32(4);
  if (crc32(bytes.subarray(0, 8)) !== view.getUint32(8)) {
    throw new EventStreamError("the prelude's CRC32 does not match: not an event-stream message");
  }
  if (total !== bytes.length) {
    throw new EventStreamError(
      `the prelude says ${total} bytes but the frame has ${bytes.length}: one WebSocket ` +
        "frame must carry exactly one event-stream message",
    );
  }
  if (headersLength > total - OVERHEAD_BYTES) {
    throw new EventStreamError(
      `the prelude's headers length (${headersLength}) leaves no room in a ${total}-byte message`,
    );
  }
  if (crc32(bytes.subarray(0, total - 4)) !== view.getUint32(total - 4)) {
    throw new EventStreamError("the message's CRC32 does not match: corrupted");
  }
  const headers = readHeaders(bytes, view, PRELUDE_BYTES, PRELUDE_BYTES + headersLength);
  return { headers, payload: bytes.slice(PRELUDE_BYTES + headersLength, total - 4) };
}

/** Headers between from and to: every value type of the encoding is read (Transcribe sends
 * strings only), so that a message with another type is still understood. */
function readHeaders(bytes, view, from, to) {
  const headers = {};
  let at = from;
  const need = (count) => {
    if (at + count > to) throw new EventStreamError("a header runs past the headers' end");
  };
  try {
    while (at < to) {
      need(1);
      const nameLength = bytes[at];
      need(1 + nameLength + 1);
      const name = decoder.decode(bytes.subarray(at + 1, at + 1 + nameLength));
      at += 1 + nameLength;
      const type = bytes[at];
      at += 1;
      let value;
      if (type === 0 || type === 1) {
        value = type === 0;
      } else if (type === 2) {
        need(1);
        value = view.getInt8(at);
        at += 1;
      } else if (type === 3) {
        need(2);
        value = view.getInt16(at);
        at += 2;
      } else if (type === 4) {
        need(4);
        value = view.getInt32(at);
        at += 4;
      } else if (type === 5 || type === 8) {
        need(8);
        value = Number(view.getBigInt64(at)); // a long, or a timestamp (ms since the epoch)
        at += 8;
      } else if (type === 6 || type === 7) {
        need(2);
        const length = view.getUint16(at);
        need(2 + length);
        const raw = bytes.slice(at + 2, at + 2 + length);
        value = type === STRING ? decoder.decode(raw) : raw;
        at += 2 + length;
      } else if (type === 9) {
        need(16);
        value = bytes.slice(at, at + 16);
        at += 16;
      } else {
        throw new EventStreamError(`a header ${name} of unknown value type ${type}`);
      }
      headers[name] = value;
    }
  } catch (error) {
    if (error instanceof EventStreamError) throw error;
    throw new EventStreamError(`the message's headers cannot be read: ${error.message}`);
  }
  return headers;
}

/** The audio of an AudioEvent frame (what the local endpoint reads; here for the tests). */
export function readAudioEvent(frame) {
  const { headers, payload } = decodeMessage(frame);
  if (headers[":message-type"] !== "event" || headers[":event-type"] !== "AudioEvent") {
    throw new EventStreamError("not an AudioEvent");
  }
  return payload;
}

/** One result of a TranscriptEvent, in the page's words: {id, partial, start, end, text,
 * items: [{content, type, stable, confidence, start, end}]}; times in seconds from the stream's
 * start, stable null where the stream was not asked for stabilization, confidence (0-1) null
 * where the result has none. */
function pageResult(result) {
  const alternative = (result.Alternatives || [])[0] || {};
  return {
    id: String(result.ResultId),
    partial: Boolean(result.IsPartial),
    start: result.StartTime,
    end: result.EndTime,
    text: typeof alternative.Transcript === "string" ? alternative.Transcript : "",
    items: (alternative.Items || []).map((item) => ({
      content: item.Content,
      type: item.Type,
      stable: item.Stable ?? null,
      confidence: item.Confidence ?? null,
      start: item.StartTime,
      end: item.EndTime,
    })),
  };
}

/** What Transcribe sent: {kind: "transcript", results} or {kind: "exception", type, message}.
 * Throws an EventStreamError for a frame that is neither. */
export function readResult(frame) {
  const { headers, payload } = decodeMessage(frame);
  const kind = headers[":message-type"];
  if (kind === "exception") {
    const type = headers[":exception-type"];
    if (typeof type !== "string") {
      throw new EventStreamError("an exception message without :exception-type");
    }
    let text = new TextDecoder().decode(payload);
    try {
      const body = JSON.parse(text || "{}");
      if (body && typeof body.Message === "string") text = body.Message;
    } catch {
      // not JSON: its text is the message
    }
    return { kind: "exception", type, message: text };
  }
  if (kind === "event" && headers[":event-type"] === "TranscriptEvent") {
    let event;
    try {
      event = JSON.parse(new TextDecoder().decode(payload));
    } catch {
      throw new EventStreamError("a TranscriptEvent whose payload is not JSON");
    }
    const results = event?.Transcript?.Results;
    if (!Array.isArray(results)) {
      throw new EventStreamError("a TranscriptEvent without Transcript.Results");
    }
    return { kind: "transcript", results: results.map(pageResult) };
  }
  throw new EventStreamError(
    `expected a TranscriptEvent or an exception, got :message-type ${kind}, ` +
      `:event-type ${headers[":event-type"]}`,
  );
}

// --- one stream ----------------------------------------------------------------------------

export const CHUNK_MS = 100; // each AudioEvent (Transcribe takes 50-200 ms; at most 1 s)
const QUEUE_MS = 10_000; // audio kept while the socket opens; older audio is dropped
// Audio queued while the socket opened is sent at twice real time, not at once: Transcribe
// refuses a stream sent faster than it is spoken ("Your stream is too big...", the local
// endpoint's docstring gives the sources), and twice is what voicewire's Python client sends at
// too (voicewire/speech_in/transcribe_client.py, MAX_PACE). Live audio that arrives while the
// queue drains waits behind it, so the order never changes.
export const DRAIN_PACE = 2;
const DRAIN_EVERY_MS = CHUNK_MS / DRAIN_PACE;

/** One Transcribe session: opens a presigned URL (each URL opens one), sends the microphone's
 * PCM in AudioEvents of 100 ms (audio given before the socket opens waits, up to 10 s, and is
 * sent at twice real time once it opens), ends
 * with the empty AudioEvent, and calls back:
 *   onResult(result): each result of each TranscriptEvent (pageResult's shape), partial ones
 *     repeating and growing under one id until its final one;
 *   onError({type, message, refused}): an exception message from Transcribe, a frame the page
 *     cannot read, or the socket failing (refused: it never opened: the URL was refused, used or
 *     expired, or the endpoint is unreachable: ask for a new one);
 *   onClose({code, reason, opened, ended}): the socket closed (ended: after our end()).
 * socketClass: the WebSocket constructor (a test may give another). */
export class TranscribeStream {
  constructor({ url, sampleRate, onResult, onError, onClose, socketClass = WebSocket }) {
    this.url = url;
    this.sampleRate = sampleRate;
    this.onResult = onResult || (() => {});
    this.onError = onError || (() => {});
    this.onClose = onClose || (() => {});
    this.socketClass = socketClass;
    this.chunkBytes = 2 * Math.round((sampleRate * CHUNK_MS) / 1000);
    this.pending = new Uint8Array(this.chunkBytes); // the next chunk, filling
    this.filled = 0;
    this.queue = []; // whole chunks (ArrayBuffers of AudioEvents) waiting for the socket
    this.drainTimer = null; // while the queue drains after the socket opened
    this.socket = null;
    this.opened = false;
    this.ended = false; // end() was called: the empty AudioEvent is sent (or queued)
    this.failed = false; // an error was reported: it is reported once
    this.closed = false;
    this.bytesSent = 0; // PCM bytes sent in AudioEvents
    this.eventsSent = 0;
  }

  get state() {
    if (this.closed) return "closed";
    if (this.ended) return "ending";
    return this.opened ? "open" : "connecting";
  }

  open() {
    let socket;
    try {
      socket = new this.socketClass(this.url);
    } catch (error) {
      this.fail({ type: "ConnectionError", message: error.message, refused: true });
      this.closed = true;
      return this;
    }
    socket.binaryType = "arraybuffer";
    this.socket = socket;
    socket.onopen = () => {
      this.opened = true;
      this.drain();
    };
    socket.onmessage = (event) => this.received(event.data);
    socket.onclose = (event) => {
      this.closed = true;
      this.stopDraining();
      const reason = event.reason ? ` "${event.reason}"` : "";
      if (!this.opened) {
        this.fail({
          type: "ConnectionError",
          message:
            `the Transcribe stream could not open (${event.code}): its URL was refused, used ` +
            "or expired, or the endpoint cannot be reached",
          refused: true,
        });
      } else if (!this.ended && !this.failed) {
        this.fail({
          type: "ConnectionError",
          message: `the Transcribe stream closed (${event.code}${reason})`,
          refused: false,
        });
      }
      this.onClose({
        code: event.code,
        reason: event.reason,
        opened: this.opened,
        ended: this.ended,
      });
    };
    return this;
  }

  /** PCM (s16le at sampleRate: an ArrayBuffer or Uint8Array), sent 100 ms at a time. */
  send(pcm) {
    if (this.ended || this.closed) return;
    const bytes = pcm instanceof Uint8Array ? pcm : new Uint8Array(pcm);
    let at = 0;
    while (at < bytes.length) {
      const count = Math.min(this.chunkBytes - this.filled, bytes.length - at);
      this.pending.set(bytes.subarray(at, at + count), this.filled);
      this.filled += count;
      at += count;
      if (this.filled === this.chunkBytes) this.flush();
    }
  }

  /** The audio is over: what is left, then the empty AudioEvent. Transcribe then sends its
   * last results and closes. */
  end() {
    if (this.ended || this.closed) return;
    this.flush();
    this.ended = true;
    this.enqueue(audioEvent());
  }

  /** Abandon the stream: no more results are reported. */
  close() {
    this.onResult = () => {};
    this.onError = () => {};
    this.ended = true;
    this.stopDraining();
    if (this.socket && this.socket.readyState <= 1) this.socket.close(1000, "closed by the page");
  }

  flush() {
    if (this.filled === 0) return;
    const chunk = this.pending.slice(0, this.filled);
    this.filled = 0;
    this.bytesSent += chunk.length;
    this.enqueue(audioEvent(chunk));
  }

  enqueue(message) {
    if (this.opened && this.queue.length === 0) {
      this.transmit(message);
      return;
    }
    this.queue.push(message);
    if (this.opened) return; // draining: nothing is dropped once the socket is open
    const most = Math.ceil(QUEUE_MS / CHUNK_MS) + 1;
    if (this.queue.length > most) this.queue.splice(0, this.queue.length - most);
  }

  /** Send the first queued message now and the rest one every 50 ms (twice real time). */
  drain() {
    if (this.queue.length === 0 || this.drainTimer !== null) return;
    const step = () => {
      if (this.closed || this.queue.length === 0) {
        this.stopDraining();
        return;
      }
      this.transmit(this.queue.shift());
      if (this.queue.length === 0) this.stopDraining();
    };
    this.drainTimer = setInterval(step, DRAIN_EVERY_MS);
    step();
  }

  stopDraining() {
    if (this.drainTimer === null) return;
    clearInterval(this.drainTimer);
    this.drainTimer = null;
  }

  transmit(message) {
    if (this.socket.readyState !== 1) return;
    this.socket.send(message);
    this.eventsSent += 1;
  }

  received(data) {
    if (!(data instanceof ArrayBuffer)) {
      const message = "Transcribe sent a text frame";
      this.fail({ type: "UnexpectedFrame", message, refused: false });
      return;
    }
    let message;
    try {
      message = readResult(data);
    } catch (error) {
      this.fail({ type: "UnexpectedFrame", message: error.message, refused: false });
      return;
    }
    if (message.kind === "exception") {
      this.fail({ type: message.type, message: message.message, refused: false });
      return;
    }
    for (const result of message.results) this.onResult(result);
  }

  fail(error) {
    if (this.failed) return;
    this.failed = true;
    this.onError(error);
  }
}
