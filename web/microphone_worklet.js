// The microphone's audio thread (an AudioWorklet: loaded by microphone.js from this file, as
// the page's Content-Security-Policy wants, never from a blob or inline code).
//
// What it does with each render quantum (128 frames at the context's rate, usually 48 kHz):
// - mixes the channels to mono;
// - resamples to the rate Transcribe was offered (16 kHz): a low-pass (two biquads, about a
//   4th-order Butterworth at 0.45 of the target rate, so that what folds over is faint) and
//   linear interpolation at the fractional step; speech recognisers are trained on 8-16 kHz, so
//   this is plenty;
// - measures, every 10 ms of output, the level (RMS, in dBFS) and calls it voice when it is
//   well above the noise floor: the floor is the quietest 10 ms of the last 5 s (speech always
//   has pauses in 5 s), voice is 12 dB over it and at least -50 dBFS;
// - posts every 50 ms: {pcm: ArrayBuffer of Int16 little-endian samples, ms, level (RMS 0..1),
//   voiceMs (how many ms of the 50 were voice)}. The buffer is transferred, not copied.
//
// A message {rate} sets another target rate (a new offer's); {stop: true} ends the processor.

const POST_MS = 50;
const STEP_MS = 10; // the voice detector's resolution
const FLOOR_BLOCK_MS = 500; // the floor is the minimum of the last FLOOR_BLOCKS blocks' minima
const FLOOR_BLOCKS = 10;
const VOICE_OVER_FLOOR_DB = 12;
const VOICE_MIN_DB = -50;
const SILENT_DB = -100; // digital silence, as a number

class Biquad {
  // A low-pass (Robert Bristow-Johnson's cookbook), direct form I.
  constructor(cutoff, rate, q) {
    const w = (2 * Math.PI * cutoff) / rate;
    const alpha = Math.sin(w) / (2 * q);
    const cos = Math.cos(w);
    const a0 = 1 + alpha;
    this.b0 = (1 - cos) / 2 / a0;
    this.b1 = (1 - cos) / a0;
    this.b2 = this.b0;
    this.a1 = (-2 * cos) / a0;
    this.a2 = (1 - alpha) / a0;
    this.x1 = this.x2 = this.y1 = this.y2 = 0;
  }

  step(x) {
    const y =
      this.b0 * x + this.b1 * this.x1 + this.b2 * this.x2 - this.a1 * this.y1 - this.a2 * this.y2;
    this.x2 = this.x1;
    this.x1 = x;
    this.y2 = this.y1;
    this.y1 = y;
    return y;
  }
}

class MicrophoneProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.setRate(options.processorOptions?.rate || 16000);
    this.port.onmessage = (event) => {
      if (event.data?.stop) this.stopped = true;
      else if (event.data?.rate) this.setRate(event.data.rate);
    };
    this.stopped = false;
  }

  setRate(rate) {
    this.rate = rate;
    this.ratio = sampleRate / rate; // input samples per output sample (sampleRate: the context's)
    // Two cascaded biquads with the Q of a 4th-order Butterworth's sections.
    this.filters =
      this.ratio > 1
        ? [new Biquad(0.45 * rate, sampleRate, 0.5412), new Biquad(0.45 * rate, sampleRate, 1.3066)]
        : [];
    this.position = 0; // where the next output sample falls, in input samples after `previous`
    this.previous = 0;
    this.out = new Int16Array(Math.round((rate * POST_MS) / 1000));
    this.count = 0;
    this.sum = 0; // of squares, over the post
    this.stepSamples = Math.round((rate * STEP_MS) / 1000);
    this.stepCount = 0;
    this.stepSum = 0;
    this.voiceMs = 0;
    this.blockMinimum = Infinity;
    this.blockSteps = 0;
    this.blocks = [];
  }

  process(inputs) {
    if (this.stopped) return false;
    const input = inputs[0];
    if (!input || input.length === 0) return true;
    const frames = input[0].length;
    for (let i = 0; i < frames; i++) {
      let x = 0;
      for (let c = 0; c < input.length; c++) x += input[c][i];
      x /= input.length;
      for (const filter of this.filters) x = filter.step(x);
      if (this.ratio === 1) {
        this.emit(x);
        continue;
      }
      // Output samples that fall between `previous` (at 0) and this sample (at 1).
      while (this.position <= 1) {
        this.emit(this.previous + (x - this.previous) * this.position);
        this.position += this.ratio;
      }
      this.position -= 1;
      this.previous = x;
    }
    return true;
  }

  emit(value) {
    const x = Math.max(-1, Math.min(1, value));
    this.out[this.count] = x < 0 ? Math.round(x * 32768) : Math.round(x * 32767);
    this.count += 1;
    this.sum += x * x;
    this.stepSum += x * x;
    this.stepCount += 1;
    if (this.stepCount === this.stepSamples) this.measure();
    if (this.count === this.out.length) this.post();
  }

  /** Ten ms of output: is it voice? */
  measure() {
    const rms = Math.sqrt(this.stepSum / this.stepCount);
    const db = rms > 0 ? 20 * Math.log10(rms) : SILENT_DB;
    this.stepSum = 0;
    this.stepCount = 0;
    this.blockMinimum = Math.min(this.blockMinimum, db);
    this.blockSteps += 1;
    if (this.blockSteps * STEP_MS >= FLOOR_BLOCK_MS) {
      this.blocks.push(this.blockMinimum);
      if (this.blocks.length > FLOOR_BLOCKS) this.blocks.shift();
      this.blockMinimum = Infinity;
      this.blockSteps = 0;
    }
    const floor = Math.min(this.blockMinimum, ...this.blocks);
    if (db >= Math.max(VOICE_MIN_DB, floor + VOICE_OVER_FLOOR_DB)) this.voiceMs += STEP_MS;
  }

  post() {
    // Int16 little-endian whatever the machine's order (all of today's are little-endian).
    const pcm = new ArrayBuffer(this.count * 2);
    const view = new DataView(pcm);
    for (let i = 0; i < this.count; i++) view.setInt16(2 * i, this.out[i], true);
    const ms = (1000 * this.count) / this.rate;
    this.port.postMessage(
      { pcm, ms, level: Math.sqrt(this.sum / this.count), voiceMs: Math.min(this.voiceMs, ms) },
      [pcm],
    );
    this.count = 0;
    this.sum = 0;
    this.voiceMs = 0;
  }
}

registerProcessor("voicewire-microphone", MicrophoneProcessor);
