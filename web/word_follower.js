// Which word the listener hears now: the words frames' timings read against the audio clock.
//
// A words frame times each written word in ms from the start of the turn's audio stream (all
// the turn's audio frames laid end to end), and comes no later than the first audio it times.
// What the listener has heard is not the time since the first frame, nor what has arrived: a
// frame that comes after the audio ran out (an underrun) starts later on the audio clock than
// the one before it ended, and the stream stands still in between. So the follower keeps, for
// each scheduled frame, where it starts in the stream and on the audio clock (player.js
// schedule()); the position at a context time is where the last frame started by then starts
// in the stream, plus how much of it has played. The same position, frozen at Stop or at a
// barge-in, is the heard_ms the page sends.

/** A word counts as heard once it has played whole: the rule the server keeps the history by
 * (functions/heard_history.py), so that the transcript's cut and what the agent remembers
 * agree. */
export function wasHeard(word, heardMs) {
  return word.end <= heardMs;
}

export const HOLD_MS = 400;

export class WordFollower {
  constructor() {
    this.words = []; // {text, start, end}: ms of the turn's audio stream, in stream order
    this.frames = []; // {at, start, end}: at: stream ms where it starts; start/end: context s
    this.streamMs = 0; // ms of the turn's audio scheduled so far
    this.cutMs = null; // ms heard when the listener stopped it (Stop, a barge-in); null: not cut
  }

  get hasWords() {
    return this.words.length > 0;
  }

  /** A words frame's words: [{text, start_ms, end_ms}]. Anything malformed is left out. */
  addWords(words) {
    if (!Array.isArray(words)) return;
    for (const word of words) {
      const { text, start_ms: start, end_ms: end } = word || {};
      if (typeof text !== "string" || !Number.isFinite(start) || !Number.isFinite(end)) continue;
      this.words.push({ text, start, end: Math.max(start, end) });
    }
    // Frames come in order; sorting keeps the binary search right if one day they do not.
    const sorted = this.words.every((w, i) => i === 0 || this.words[i - 1].start <= w.start);
    if (!sorted) this.words.sort((a, b) => a.start - b.start);
  }

  /** One frame of the turn went to the player: {start, end} in context seconds. */
  addAudio({ start, end }) {
    this.frames.push({ at: this.streamMs, start, end });
    this.streamMs += (end - start) * 1000;
  }

  /** Ms of the turn's audio played by context time t (player.heardTime: at the speakers);
   * -1 before its first frame starts (0 would already be inside the first word). */
  positionAt(t) {
    // the last frame started by t: frames start in order, each where (or after) one ended
    const index = lastStartedBy(this.frames, t);
    if (index < 0) return -1;
    const frame = this.frames[index];
    return frame.at + Math.min(t - frame.start, frame.end - frame.start) * 1000;
  }

  /** Freeze what was heard: the listener stopped hearing at heardMs. */
  cut(heardMs) {
    this.cutMs = Math.max(0, Math.round(heardMs));
    return this.cutMs;
  }

  /** The index of the word being heard at stream ms, or -1 (before the first, or a long
   * pause). A word stays marked through the short pause after it (HOLD_MS, longer than the
   * pause after a sentence) until the next one starts: a mark that blinks off between words is
   * harder to follow than one that steps from word to word. */
  wordAt(ms) {
    const index = lastStartedBy(this.words, ms);
    return index >= 0 && ms < this.words[index].end + HOLD_MS ? index : -1;
  }

  /** How many words, from the first, were heard by stream ms (wasHeard). */
  heardCount(ms) {
    let count = lastStartedBy(this.words, ms) + 1;
    while (count > 0 && !wasHeard(this.words[count - 1], ms)) count -= 1;
    return count;
  }
}

/** The index of the last item (in order of start) whose start is at or before value; -1 if
 * none: a binary search, as a long answer has hundreds of words and thousands of frames. */
function lastStartedBy(items, value) {
  let low = 0;
  let high = items.length;
  while (low < high) {
    const middle = (low + high) >> 1;
    if (items[middle].start <= value) low = middle + 1;
    else high = middle;
  }
  return low - 1;
}
