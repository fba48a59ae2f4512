// Plays the turn's PCM (s16le, 24 kHz, mono) as it arrives, with the Web Audio API.
//
// Each frame becomes an AudioBuffer started exactly where the previous one ends, on the audio
// clock (sample-accurate), so frames that arrive in time play back to back without a gap or a
// click. Only the first frame of a turn, or one that arrives after the audio ran out (a stall),
// is started a little ahead of "now", the time it takes to hand it to the audio thread.
// Every scheduled source is kept in a list, so that Stop can silence them all at once.
// A barge-in that may be a backchannel holds the turn instead (pause, then resume or stop): the
// audio clock itself is suspended, so the scheduled audio, the word timings and the heard
// position all wait where they were, and go on from there.

export const SAMPLE_RATE = 24000;
const LEAD_SECONDS = 0.05; // headroom for a first frame: later ones are chained, not timed
const MIN_AHEAD_SECONDS = 0.005; // a chained start closer to "now" than this may start late
const FADE_SECONDS = 0.008; // Stop ramps down this fast: at once, yet without a click

export class Player {
  constructor() {
    this.context = null;
    this.output = null; // this turn's gain node: muting it silences the turn at once
    this.sources = new Set(); // scheduled or playing, not yet ended
    this.playAt = 0; // context time at which the next frame starts; 0: nothing chained
    this.zeroRun = 0; // exact-zero samples at the end of the audio so far (the pauses)
    this.framesDecoded = 0;
    this.secondsScheduled = 0;
    this.paused = false; // pause() was called, resume() or stop() not yet
  }

  /** The AudioContext, made (or resumed) on a click: browsers let audio start only there. */
  ensureContext() {
    if (!this.context) {
      try {
        this.context = new AudioContext({ sampleRate: SAMPLE_RATE, latencyHint: "interactive" });
      } catch {
        this.context = new AudioContext(); // buffers at 24 kHz are resampled on the way out
      }
    }
    if (this.context.state === "suspended") this.context.resume();
    return this.context;
  }

  /** Hold the turn: fade out, then suspend the audio clock (the fade keeps it free of a
   * click, and costs the listener FADE_SECONDS of audio). Frames must not be scheduled while
   * paused (schedule() would resume the clock): the caller keeps them until resume(). */
  pause() {
    const context = this.context;
    if (!context || !this.output || this.paused) return;
    this.paused = true;
    const now = context.currentTime;
    this.output.gain.setValueAtTime(this.output.gain.value, now);
    this.output.gain.linearRampToValueAtTime(0, now + FADE_SECONDS);
    const output = this.output;
    setTimeout(() => {
      if (this.paused && this.output === output) context.suspend();
    }, FADE_SECONDS * 2000);
  }

  /** Go on from where pause() held the turn. Resolves once the audio clock runs again, so that
   * heardAt() maps it to the page's clock anew (the output timestamp is stale until then). */
  async resume() {
    const context = this.context;
    if (!context || !this.paused) return;
    this.paused = false;
    await context.resume();
    if (this.output) {
      const now = context.currentTime;
      this.output.gain.setValueAtTime(0, now);
      this.output.gain.linearRampToValueAtTime(1, now + FADE_SECONDS);
    }
    const from = context.currentTime;
    for (let waited = 0; waited < 300 && context.currentTime <= from; waited += 10) {
      await new Promise((done) => setTimeout(done, 10));
    }
  }

  /** A new turn: whatever still plays is stopped, the next frame starts a new chain. */
  startTurn() {
    this.stop();
    const context = this.ensureContext();
    this.output = context.createGain();
    this.output.connect(context.destination);
  }

  /** Silence at once: mute this turn's output and stop every scheduled source. Frames of the
   * turn that arrive later must not be given to schedule() (the caller drops them). */
  stop() {
    const context = this.context;
    if (context && this.output) {
      const now = context.currentTime;
      this.output.gain.setValueAtTime(this.output.gain.value, now);
      this.output.gain.linearRampToValueAtTime(0, now + FADE_SECONDS);
      for (const source of this.sources) {
        try {
          source.stop(now + FADE_SECONDS); // one not started yet never starts
        } catch {
          // already stopped
        }
      }
      const output = this.output;
      setTimeout(() => output.disconnect(), 100);
    }
    this.sources.clear();
    this.output = null;
    this.playAt = 0;
    this.zeroRun = 0;
    if (this.paused) {
      this.paused = false;
      context?.resume(); // the next turn plays on a running clock (it ramps this one down)
    }
  }

  /** Schedule one frame of PCM (a DataView of little-endian int16 samples).
   * Returns {start, end} in context seconds, stalled (the audio before it had run out), and
   * silence: the seconds of exact digital silence the audio ends with (the speech server puts
   * 0.25 s of it after each sentence, which tells where one sentence's audio ends). */
  schedule(pcm) {
    const context = this.ensureContext();
    if (!this.output) this.startTurn();
    const count = pcm.byteLength >> 1;
    if (count === 0) return null;
    const buffer = context.createBuffer(1, count, SAMPLE_RATE);
    const channel = buffer.getChannelData(0);
    let lastSound = -1;
    for (let i = 0; i < count; i++) {
      const sample = pcm.getInt16(2 * i, true);
      if (sample !== 0) lastSound = i;
      channel[i] = sample / 32768;
    }
    this.zeroRun = lastSound < 0 ? this.zeroRun + count : count - 1 - lastSound;

    const source = context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.output);
    const now = context.currentTime;
    const chained = this.playAt > 0;
    const stalled = chained && this.playAt < now + MIN_AHEAD_SECONDS;
    const start = chained && !stalled ? this.playAt : now + LEAD_SECONDS;
    source.start(start);
    this.playAt = start + buffer.duration;
    this.sources.add(source);
    source.onended = () => this.sources.delete(source);
    this.framesDecoded += 1;
    this.secondsScheduled += buffer.duration;
    return { start, end: this.playAt, stalled, silence: this.zeroRun / SAMPLE_RATE };
  }

  /** Context seconds as the page's clock (performance.now() ms) at which they are heard:
   * getOutputTimestamp maps the audio clock to the page's at the speakers, so the output
   * latency is included. Before the context runs, the current time and latency stand in. */
  heardAt(contextTime) {
    const context = this.context;
    if (!context) return performance.now();
    const stamp = context.getOutputTimestamp ? context.getOutputTimestamp() : null;
    if (stamp && stamp.performanceTime > 0) {
      return stamp.performanceTime + (contextTime - stamp.contextTime) * 1000;
    }
    const latency = context.outputLatency || context.baseLatency || 0;
    return performance.now() + (contextTime - context.currentTime + latency) * 1000;
  }

  /** The context time being heard now (for the sentence highlight). */
  get heardTime() {
    const context = this.context;
    if (!context) return 0;
    return context.currentTime - (context.outputLatency || context.baseLatency || 0);
  }

  get playing() {
    return this.sources.size;
  }
}
