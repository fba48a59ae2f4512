// The microphone: getUserMedia with the browser's echo cancellation, noise suppression and
// automatic gain on, into an AudioWorklet (microphone_worklet.js) that hands back 50 ms chunks
// of 16-bit little-endian PCM at the rate Transcribe was offered, each with its level and how
// much of it was voice. What goes wrong is said in words a person can act on (microphoneTrouble).

export const CONSTRAINTS = Object.freeze({
  audio: {
    echoCancellation: true, // the agent's voice from the speakers must not come back as "you"
    noiseSuppression: true,
    autoGainControl: true,
    channelCount: 1,
  },
});

const WORKLET = new URL("./microphone_worklet.js", import.meta.url);
const loaded = new WeakMap(); // context -> its addModule promise: a processor registers once

/** What went wrong, as {kind, message}: kind "denied" (NotAllowedError: the person or the
 * browser's settings said no, or the page is not allowed to ask), "absent" (NotFoundError: no
 * microphone), "busy" (NotReadableError: another program holds it), "insecure" (no
 * mediaDevices: the page is not https or localhost), else "failed". */
export function microphoneTrouble(error) {
  const name = error?.name || "";
  if (name === "NotAllowedError" || name === "SecurityError" || name === "PermissionDeniedError") {
    return {
      kind: "denied",
      message:
        "The microphone is blocked: allow it for this page (the icon in the address bar), " +
        "then press Listen again. Typing works meanwhile.",
    };
  }
  if (["NotFoundError", "OverconstrainedError", "DevicesNotFoundError"].includes(name)) {
    return {
      kind: "absent",
      message:
        "No microphone was found: plug one in and press Listen again. Typing works meanwhile.",
    };
  }
  if (name === "NotReadableError" || name === "TrackStartError" || name === "AbortError") {
    return {
      kind: "busy",
      message:
        "The microphone could not be started (another program may be using it). Typing " +
        "works meanwhile.",
    };
  }
  if (name === "InsecureContext") {
    return {
      kind: "insecure",
      message:
        "This browser offers the microphone only to secure pages (https://, or localhost). " +
        "Typing works.",
    };
  }
  return {
    kind: "failed",
    message:
      `The microphone could not be started (${name || "error"}: ${error?.message || error}). ` +
      "Typing works meanwhile.",
  };
}

/** The microphone, once started: onChunk({pcm, ms, level, voiceMs}) every 50 ms. */
export class Microphone {
  /** context(): the AudioContext to capture in (made in a click: browsers start audio only
   * from a gesture); rate: the PCM's sample rate; onEnded(): the device went away. */
  constructor({ context, rate = 16000, onChunk, onEnded }) {
    this.context = context;
    this.rate = rate;
    this.onChunk = onChunk;
    this.onEnded = onEnded || (() => {});
    this.stream = null;
    this.source = null;
    this.node = null;
    this.sink = null;
    this.running = false;
    this.wanted = false; // start() called and stop() not since: a stop during start wins
  }

  /** Ask for the microphone and start; throws what getUserMedia threw (see microphoneTrouble).
   * A stop() while the browser asks (or while it starts) wins: nothing is left running. */
  async start() {
    if (this.running) return;
    this.wanted = true;
    if (!navigator.mediaDevices?.getUserMedia) {
      const error = new Error("navigator.mediaDevices is missing");
      error.name = "InsecureContext";
      throw error;
    }
    const context = this.context();
    const stream = await navigator.mediaDevices.getUserMedia(CONSTRAINTS);
    this.stream = stream;
    if (!this.wanted) return this.stop();
    try {
      if (!loaded.has(context)) loaded.set(context, context.audioWorklet.addModule(WORKLET.href));
      await loaded.get(context);
      if (context.state === "suspended") await context.resume();
    } catch (error) {
      loaded.delete(context);
      this.stop();
      throw error;
    }
    if (!this.wanted) return this.stop();
    this.source = context.createMediaStreamSource(stream);
    this.node = new AudioWorkletNode(context, "voicewire-microphone", {
      numberOfInputs: 1,
      numberOfOutputs: 1,
      channelCount: 1,
      channelCountMode: "explicit", // the browser mixes a stereo device down to mono
      processorOptions: { rate: this.rate },
    });
    this.node.port.onmessage = (event) => {
      if (this.running) this.onChunk(event.data);
    };
    // A silent sink: some browsers run a worklet only while the destination pulls it.
    this.sink = context.createGain();
    this.sink.gain.value = 0;
    this.source.connect(this.node).connect(this.sink).connect(context.destination);
    for (const track of stream.getAudioTracks()) {
      track.onended = () => {
        if (this.running) {
          this.stop();
          this.onEnded();
        }
      };
    }
    this.running = true;
  }

  /** Another sample rate (a new offer's), from the next chunk on. */
  setRate(rate) {
    if (rate === this.rate) return;
    this.rate = rate;
    this.node?.port.postMessage({ rate });
  }

  /** Stop capturing and let the device go (the browser's recording light goes off). */
  stop() {
    this.running = false;
    this.wanted = false;
    this.node?.port.postMessage({ stop: true });
    for (const node of [this.source, this.node, this.sink]) {
      try {
        node?.disconnect();
      } catch {
        // not connected
      }
    }
    for (const track of this.stream?.getTracks() || []) track.stop();
    this.stream = this.source = this.node = this.sink = null;
  }
}

/** A level (RMS 0..1) as a meter's 0..1: -60 dBFS and under is 0, 0 dBFS is 1. */
export function meterValue(level) {
  if (!(level > 0)) return 0;
  return Math.max(0, Math.min(1, (20 * Math.log10(level) + 60) / 60));
}
