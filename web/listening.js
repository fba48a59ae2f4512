// Whose turn it is: when the person has finished speaking (their words become an `ask`), and
// when their voice may cut the agent off (a barge-in). No DOM, no audio and no clock of its own:
// app.js feeds it the microphone's chunks (their length and how much of them was voice,
// microphone_worklet.js) and Transcribe's results (transcribe_stream.js), calls tick() on a
// timer, and acts on what it says; a test feeds it the same with a fake clock.
//
// States: idle (no microphone) -> listening -> hearing (someone speaks: voice, or words
// recognised) -> back to listening once the utterance is decided: a turn (asked), or nothing.
// With push-to-talk, release() adds ending (the last results are awaited) and then idle.
//
// The end of a turn (hands-free): a final result (IsPartial false) with words, then nothing new
// (no voice, no result) for a wait that depends on what that final result says, the rule of
// voicewire/speech_in/end_of_turn.py (the Python client's: the same rule, the same words, the
// same defaults; a test holds the two together): endOfTurnCompleteMs (250 ms) when its text
// closes a sentence (. ? or !, a closing quote or bracket may follow) and its last word is not
// one that announces more (CONTINUING_WORDS: "and", "the", "to"...), else endOfTurnIncompleteMs
// (1.5 s: a breath mid-sentence). Voice or a new result restarts the wait. The final texts of
// the utterance, joined, are the prompt. Voice with no words for noWordsMs is "didn't catch
// that"; words with (almost) no voice under them are not a turn (a recogniser's guess at silence
// or noise: Whisper is known to "hear" a "Thank you." in silence). An utterance longer than
// maxUtteranceMs is cut there: what was said so far is asked, and the page says so.
//
// Barge-in, while the agent's voice plays: the agent is stopped (app.js's Stop path, which sends
// cancel with heard_ms) only when the person's speech passes a guard, else a cough, an "mm-hm"
// or the agent's own voice coming back through the microphone would cut it off:
//   bargeInOn "speech" (the default): bargeInMinSpeechMs of the person's voice in one run
//     (pauses shorter than runGapMs do not break a run) holds the agent at once, before any
//     word is recognised: its voice pauses (app.js suspends the player's audio clock; nothing
//     is dropped). The recogniser then decides: a word it is sure of (a final result's, or a
//     partial's stable one) that is neither the agent's echo nor a backchannel cuts the agent
//     off (barge-in; the audio stopped when the hold began), and so does a turn; an utterance
//     that ends as a backchannel ("Mm-hm.", "Yeah."), echo or noise lets the agent go on from
//     where it paused (resume), as does a hold with no word of the person's (none, or only
//     backchannels and guesses under minConfidence) once the voice has been quiet for
//     resumeAfterMs: the final result of a recogniser behind on a busy machine (Whisper beside
//     Kokoro on 2 cores) can come seconds late. A word of theirs not yet sure keeps the hold
//     until it is: a resume, then a cut, would make the agent go on for a moment, then stop.
//     LiveKit Agents calls this resuming a false interruption (its turn-handling option
//     resume_false_interruption). A sure word: a final result's, a partial's stable one, or one
//     of confidence sureConfidence or more;
//   bargeInOn "first-word": a first word recognised (a partial's, stable or not) that is
//     neither the agent's echo nor a backchannel (isBackchannel: "yeah", a hum "mm-hmm"...), with
//     minSpeechMs of the person's voice under the utterance, cuts the agent off; nothing holds
//     it before.
// In both, a word of confidence under minConfidence is a recogniser's guess, not the person's.
// The person's voice is the worklet's voice less the agent's echo: app.js gives each chunk's
// echoMs from an EchoGate (below), which compares the microphone's level, 10 ms at a time, with
// the agent's audio as it was played (the page knows what it plays): sound no louder than the
// loudest echo that fits what the microphone heard while the agent spoke is echo, not voice.
// Echo guard on words: words recognised while the agent speaks that are among the agent's own
// words played around that moment (echoBackMs before the word being heard, echoAheadMs after;
// the words frames say which) are its echo: they never pass the guard, and an utterance made of
// them only is never asked (a recogniser mishears an echo too: "a good thing" for "a good
// question", hence the level gate). An utterance that overlapped the agent's voice and did not
// pass the guard is dropped whole, its words too; so is one said over the agent whose words are
// all backchannels: a backchannel is not a question.
// Measured with `voicewire bench bargein` on the page in Chromium (docs/results.md, "Barge-in by
// voice"; 2 cores): "speech" silences the agent 250 ms after the first chunk marked as the
// person's voice (p50 and p95), never cuts it on its own echo (0 in 20 turns, the echo about as
// loud as the agent: the browser's echo canceller left all of it) nor on a cough; a spoken
// "Mm-hm." (0.85 s of voice) holds it 1.4-2.2 s, then it goes on (0 cuts in 5). No rule that
// acts within 300 ms of voice can tell "Mm-hm" from "Wait"; the recogniser can, a second later.
// "first-word" never holds and waits for the recogniser before it silences anything: 0.5 s
// p50, seconds at p95. Over a loud echo both wait for the echo gate to rule the echo out
// (1-2 s): a loud loudspeaker wants a louder voice.
//
// Every threshold is in LISTENING, the one place to change them (or pass options to TurnTaking);
// the echo gate's are in ECHO (or pass options to EchoGate).
// Push-to-talk (Space held) is a person taking the floor on purpose: it stops the agent at once,
// with no guard, and its turn ends when the key is released.

export const LISTENING = Object.freeze({
  endOfTurnCompleteMs: 250, // after a final result that reads as finished (soundsComplete)
  endOfTurnIncompleteMs: 1500, // after one that does not
  maxUtteranceMs: 30_000,
  bargeInOn: "speech", // or "first-word"
  bargeInMinSpeechMs: 250,
  runGapMs: 300,
  resumeAfterMs: 1500, // "speech": a hold with no word of the person's, the voice quiet this long
  sureConfidence: 0.5, // a partial's word this confident is sure, stable or not
  minConfidence: 0.15, // a word the recogniser gives less is no word of the person's (a guess)
  minSpeechMs: 150, // an utterance with less voice is not a turn
  noWordsMs: 3000, // voice or a partial, then nothing new for this long: decided as it stands
  releaseWaitMs: 4000, // push-to-talk: the longest wait for the last results after release
  echoBackMs: 3000, // recognition lags the voice: the agent's words this far back may echo
  echoAheadMs: 500,
});

const BARGE_IN_ON = ["speech", "first-word"];

// Words after which a sentence goes on, even when the recogniser closed it with a full stop:
// voicewire/speech_in/end_of_turn.py's CONTINUING_WORDS, word for word.
export const CONTINUING_WORDS = Object.freeze([
  ...["a", "an", "the", "and", "or", "but", "so", "because", "if", "then", "to", "of", "in"],
  ...["on", "at", "for", "with", "from", "by", "as", "than", "that", "which", "who", "whose"],
  ...["my", "your", "his", "her", "its", "our", "their", "this", "these", "those", "is", "are"],
  ...["was", "were", "be", "um", "uh", "er", "like"],
]);
const CONTINUING = new Set(CONTINUING_WORDS);

// A listener's signs that they follow, not that they want the floor: they are no first word
// (wordKey's form: "Mm-hmm." is "mmhmm"). So is any word of letters with no vowel, and a hum
// that ends in an "a" or an "i": how a recogniser spells a hum ("Mm", "Hmm"; Whisper tiny.en
// heard Kokoro's "Mm-hm." as "M .H .M .H.", "MMA .M .H." and "MMI", docs/results.md).
export const BACKCHANNEL_WORDS = Object.freeze([
  ...["uhhuh", "uhhum", "ah", "aha", "oh", "uh", "um", "yeah", "yep", "yes", "ok", "okay"],
  ...["right", "sure", "wow"],
]);
const BACKCHANNEL = new Set(BACKCHANNEL_WORDS);
// "mma", "mmi", "hmma": two or more of m and h, then an a or an i; not "ma", "me" or "mama".
const HUM_WITH_A_VOWEL = /^(?=[hm]{2})[hm]*m[hm]*[ai]$/;

/** A backchannel word (wordKey's form): BACKCHANNEL_WORDS, or a hum (letters, no vowel). */
export function isBackchannel(word) {
  return BACKCHANNEL.has(word) || /^[b-df-hj-np-tv-xz]+$/.test(word) || HUM_WITH_A_VOWEL.test(word);
}
const CLOSED = /[.?!]['")\]]*$/u; // end_of_turn.py's _CLOSED
const WORD = /[\p{L}\p{N}_']+/gu; // its _WORD: Python's [\w']

/** Whether a final result's text reads as a finished question or request (end_of_turn.py's
 * sounds_complete): it closes a sentence, and its last word announces nothing more. */
export function soundsComplete(text) {
  const stripped = String(text ?? "").trim();
  const words = stripped.toLowerCase().match(WORD) || [];
  return words.length > 0 && CLOSED.test(stripped) && !CONTINUING.has(words.at(-1));
}

/** A word's letters and digits, lower-cased: how recognised words and the agent's are compared. */
export function wordKey(text) {
  return String(text)
    .toLowerCase()
    .replace(/[^\p{L}\p{N}]+/gu, "");
}

/** The words of a result (transcribe_stream.js's shape): its items' words, else its text's. */
export function resultWords(result) {
  return resultEntries(result).map((entry) => entry.key);
}

/** A result's words as {key (wordKey's form), sure, confident}: sure when the result is final,
 * the item is stable (partial-results stabilization: the recogniser will not change it) or
 * its confidence reaches sureConfidence; confident unless its confidence is under
 * minConfidence. A partial's unstable tail is
 * a guess, and so is a word the recogniser gives little confidence: Whisper tiny.en hears a hum
 * as "MMA Champ." (0.05 for "Champ.") or "MMA sham.", when the words of real questions and
 * interruptions get 0.33 and more (docs/results.md). */
export function resultEntries(
  result,
  { minConfidence, sureConfidence } = LISTENING, // the options' thresholds
) {
  const final = !result.partial;
  const items = (result.items || []).filter((item) => item.type !== "punctuation");
  const entries = items.length
    ? items.map((item) => ({
        key: wordKey(item.content),
        sure: final || item.stable === true || item.confidence >= sureConfidence,
        confident: item.confidence == null || item.confidence >= minConfidence,
      }))
    : String(result.text || "")
        .split(/\s+/)
        .map((word) => ({ key: wordKey(word), sure: final, confident: true }));
  return entries.filter((entry) => entry.key);
}

/** 10 ms levels (dBFS) of 16-bit little-endian PCM at `rate`: what EchoGate compares. */
export function stepLevels(view, rate, stepMs = ECHO.stepMs) {
  const step = Math.max(1, Math.round((rate * stepMs) / 1000));
  const count = view.byteLength >> 1;
  const levels = [];
  for (let start = 0; start + step <= count; start += step) {
    let sum = 0;
    for (let i = start; i < start + step; i++) {
      const x = view.getInt16(2 * i, true) / 32768;
      sum += x * x;
    }
    levels.push(sum > 0 ? 10 * Math.log10(sum / step) : -100);
  }
  return levels;
}

export const ECHO = Object.freeze({
  stepMs: 10,
  maxLagMs: 500, // the echo's delay (output and input latency, the room), at most
  historyMs: 4000, // what the microphone heard this far back bounds the echo
  loudDb: -40, // the agent's steps louder than this tell how loud its echo is, at most
  soundDb: -50, // quieter microphone steps are silence (the worklet's voice floor)
  minSteps: 20, // loud steps at a lag before they bound the echo; until then, priorDb
  priorDb: 0, // the echo as loud as the agent (no loss) until the microphone says otherwise
  percentile: 0.9, // of (microphone - agent) at a lag: the bound (an echo's level wavers)
  marginDb: 10, // the person's voice is this much louder than the loudest echo that fits
  recentMs: 1000, // a lag is ruled out by the microphone's sound this far back...
  pauseShare: 0.15, // ...when more than this share of it fell in the agent's pauses at that lag
});

/** How much of what the microphone hears is the agent's own voice coming back: a loudspeaker's
 * echo that the browser's echo canceller left (or never saw: an echo injected in a fake
 * microphone's file, as `voicewire bench bargein` does). The page knows what it plays: the
 * agent's audio as 10 ms levels on the page's clock (played; silenced when it stops), and the
 * microphone's (heard). An echo is the agent's voice some delay later (0 to maxLagMs: output and
 * input latency, the room) and some dB quieter (or louder: automatic gain). What the microphone
 * heard while the agent spoke bounds it: for each lag, a high percentile of (microphone minus
 * agent) over the last historyMs where the agent was loud (an echo's level wavers by several
 * dB around the agent's, step to step; a microphone that was silent gives a bound far below
 * the agent). The loudest echo that fits some lag is expected now; a microphone step counts as
 * the person's voice only when it is marginDb louder than that, and such steps never bound the
 * echo (the person's voice would raise the bound and pass for echo itself). Until a lag has
 * minSteps of evidence the echo is assumed as loud as the agent (priorDb): in the first half
 * second or so of the agent's voice after the microphone starts, a barge-in needs a voice
 * marginDb louder than the agent's. Pure: no clock and no audio of its own (app.js feeds it). */
export class EchoGate {
  constructor(options = {}) {
    this.options = { ...ECHO, ...options };
    this.playout = new Map(); // step index (page ms / stepMs) -> dB: the agent as heard
    this.mic = []; // [step number since the microphone started, dB, a person's?], oldest first
    this.start = Infinity; // page ms at which the microphone's step 0 began
    this.bounds = null; // per lag: the echo's loudest level over the agent's, in dB (cached)
  }

  /** The microphone (re)started: its steps are counted from 0 again. */
  restart() {
    this.mic = [];
    this.start = Infinity;
    this.bounds = null;
  }

  /** The agent's audio: its 10 ms levels, heard from page time atMs on. */
  played(atMs, levels) {
    const first = Math.round(atMs / this.options.stepMs);
    levels.forEach((db, k) => this.playout.set(first + k, db));
    // Frames may come far ahead of their playing (faster than real time): what is forgotten
    // here is a minute older than this one (heard() forgets what the microphone is past).
    const old = first - Math.round(60_000 / this.options.stepMs);
    for (const index of this.playout.keys()) if (index < old) this.playout.delete(index);
    this.bounds = null;
  }

  /** The player went silent at atMs: what it had scheduled after that is never heard. */
  silenced(atMs) {
    const from = Math.round(atMs / this.options.stepMs);
    for (const index of this.playout.keys()) if (index >= from) this.playout.delete(index);
    this.bounds = null;
  }

  /** The microphone: its 10 ms levels, the last one ending at page time atMs (when the chunk
   * came). Chunks come late and in bursts when the page is busy, never early, and their audio
   * is gapless: the steps are counted, and step 0's time is the earliest that any chunk's
   * arrival allows. Returns how many ms of these steps are the agent's echo (sound, but not
   * marginDb over the loudest echo that fits). */
  heard(atMs, levels) {
    const o = this.options;
    const first = this.mic.length ? this.mic.at(-1)[0] + 1 : 0;
    this.start = Math.min(this.start, atMs - (first + levels.length) * o.stepMs);
    // Judged against what was heard before them; a person's voice never bounds the echo (it
    // is louder than the echo: it would raise the bound and pass for echo itself).
    let echoMs = 0;
    levels.forEach((db, k) => {
      const number = first + k;
      const expected = this.expected(this.index(number));
      const sound = db > o.soundDb;
      if (sound && db <= expected + o.marginDb) echoMs += o.stepMs;
      this.mic.push([number, db, sound && db > expected + o.marginDb]);
    });
    const keep = Math.round((o.historyMs + o.maxLagMs) / o.stepMs);
    if (this.mic.length > keep) this.mic.splice(0, this.mic.length - keep);
    const old = this.index(first) - keep;
    for (const index of this.playout.keys()) if (index < old) this.playout.delete(index);
    this.bounds = null;
    return echoMs;
  }

  /** A microphone step's index on the page's clock (as the agent's steps are). */
  index(number) {
    return Math.round(this.start / this.options.stepMs) + number;
  }

  /** The loudest echo (dB) that fits what the microphone heard, at step `index`; -Infinity
   * when the agent was quiet at every lag. */
  expected(index) {
    const o = this.options;
    const bounds = this.echoBounds();
    let loudest = -Infinity;
    bounds.forEach((bound, lag) => {
      const agent = this.playout.get(index - lag);
      if (agent !== undefined && agent > o.soundDb) loudest = Math.max(loudest, agent + bound);
    });
    return loudest;
  }

  /** Per lag (in steps): a high percentile of microphone minus agent over the history's
   * steps where the agent was loud (or priorDb with fewer than minSteps of them); -Infinity
   * for a lag the recent sound rules out: more than pauseShare of the microphone's sounding
   * steps in the last recentMs fell where the agent, at that lag, was quiet (an echo is quiet
   * where the agent is: a person speaking over the agent is not). */
  echoBounds() {
    if (this.bounds) return this.bounds;
    const o = this.options;
    const lags = Math.floor(o.maxLagMs / o.stepMs) + 1;
    const recent = this.mic.length ? this.mic.at(-1)[0] - Math.round(o.recentMs / o.stepMs) : 0;
    this.bounds = [];
    for (let lag = 0; lag < lags; lag++) {
      const gaps = [];
      let sounding = 0;
      let inPauses = 0;
      for (const [number, db, person] of this.mic) {
        const agent = this.playout.get(this.index(number) - lag) ?? -Infinity;
        if (number > recent && db > o.soundDb) {
          sounding += 1;
          if (agent <= o.soundDb) inPauses += 1;
        }
        if (!person && agent > o.loudDb) gaps.push(Math.max(db, -100) - agent);
      }
      if (sounding >= o.minSteps && inPauses > o.pauseShare * sounding) {
        this.bounds.push(-Infinity);
      } else if (gaps.length < o.minSteps) {
        this.bounds.push(o.priorDb);
      } else {
        gaps.sort((x, y) => x - y);
        this.bounds.push(gaps[Math.floor(o.percentile * (gaps.length - 1))]);
      }
    }
    return this.bounds;
  }
}

function freshUtterance() {
  return {
    startedAt: null, // the first voice or result
    voiceAt: null, // the first voice
    speechMs: 0, // voice, in all
    runMs: 0, // voice in the current run
    lastVoiceAt: null,
    lastResultAt: null,
    lastFinal: "", // the text of the last final result with words: it sets the wait
    results: new Map(), // id -> {text, words, partial, echoFree, meant, sure}: in order
    overlapped: false, // the agent's voice played during it
    passed: false, // the barge-in guard passed
    held: false, // ...on voice alone ("speech"): the agent is paused until words decide
    heldAt: null,
    resumed: false, // ...and it went on: only a word of the person's cuts it now
    bargedIn: false, // the agent was stopped for it
    shown: "",
  };
}

export class TurnTaking {
  /** now(): ms (performance.now, or a test's clock); agent: {speaking(): bool, wordsAround(backMs,
   * aheadMs): [word texts]}; options: LISTENING's, any of them; on(event): what happened:
   *   {type: "state", state}
   *   {type: "heard", text, final}: the utterance so far (final: the turn's text; "": nothing)
   *   {type: "hold"}: pause the agent's voice ("speech": enough voice, no word yet)
   *   {type: "resume"}: the hold was no barge-in: the agent's voice goes on
   *   {type: "barge-in", reason}: stop the agent now ("speech", "first-word", "push")
   *   {type: "turn", text, cut}: ask this (cut: the utterance reached maxUtteranceMs)
   *   {type: "missed", why}: "didn't catch that" ("no-words": voice, no words; "no-voice":
   *     push-to-talk with nothing said)
   *   {type: "ignored", why, text}: dropped without a word ("echo", "noise", "no-voice",
   *     "backchannel") */
  constructor({ now = () => performance.now(), agent = {}, options = {}, on = () => {} } = {}) {
    this.now = now;
    this.agent = { speaking: () => false, wordsAround: () => [], ...agent };
    this.options = { ...LISTENING, ...options };
    if (!BARGE_IN_ON.includes(this.options.bargeInOn)) {
      throw new Error(`bargeInOn is one of ${BARGE_IN_ON.join(", ")}`);
    }
    this.on = on;
    this.state = "idle";
    this.mode = null; // "open" (hands-free) or "push" (push-to-talk)
    this.done = new Set(); // result ids of utterances decided: their late results are ignored
    this.utterance = freshUtterance();
    this.releasedAt = null;
  }

  /** Start listening: "open" (hands-free: turns end by themselves) or "push" (until release). */
  start(mode = "open") {
    if (mode !== "open" && mode !== "push") throw new Error(`mode is open or push, not ${mode}`);
    this.mode = mode;
    this.utterance = freshUtterance();
    this.releasedAt = null;
    this.setState("listening");
    if (mode === "push" && this.agent.speaking()) {
      this.utterance.bargedIn = true;
      this.emit({ type: "barge-in", reason: "push" });
    }
  }

  /** Stop listening: what was being said is dropped (a held agent goes on). */
  stop() {
    this.resume();
    const shown = this.utterance.shown;
    this.mode = null;
    this.utterance = freshUtterance();
    if (shown) this.emit({ type: "heard", text: "", final: false });
    this.setState("idle");
  }

  /** Push-to-talk released: the turn ends once the stream's last results came (streamEnded)
   * or after releaseWaitMs. */
  release() {
    if (this.mode !== "push" || this.state === "idle" || this.state === "ending") return;
    this.releasedAt = this.now();
    this.setState("ending");
  }

  /** The Transcribe stream ended (or failed): its partial results will not become final. */
  streamEnded() {
    for (const entry of this.utterance.results.values()) entry.partial = false;
    if (this.state === "ending") this.decide(false);
    else this.tick();
  }

  /** A chunk of the microphone's audio: {ms, voiceMs, echoMs}; echoMs of its voice are the
   * agent's echo (EchoGate): not the person's voice. */
  audio({ voiceMs = 0, echoMs = 0 }) {
    if (this.state === "idle" || this.state === "ending") return;
    voiceMs = Math.max(0, voiceMs - echoMs);
    const t = this.now();
    const u = this.utterance;
    if (voiceMs > 0) {
      if (u.startedAt === null) u.startedAt = t;
      if (u.voiceAt === null) u.voiceAt = t;
      if (u.lastVoiceAt !== null && t - u.lastVoiceAt > this.options.runGapMs) u.runMs = 0;
      u.runMs += voiceMs;
      u.speechMs += voiceMs;
      u.lastVoiceAt = t;
      if (this.state === "listening") this.setState("hearing");
    }
    if (u.startedAt !== null && this.agent.speaking()) u.overlapped = true;
    this.guard();
    this.tick();
  }

  /** A result from Transcribe: {id, partial, text, items}. */
  result(result) {
    if (this.state === "idle" || this.done.has(result.id)) return;
    const u = this.utterance;
    const entries = resultEntries(result, this.options);
    const words = entries.map((entry) => entry.key);
    if (!words.length && !u.results.has(result.id)) return; // nothing heard yet
    const t = this.now();
    if (u.startedAt === null) u.startedAt = t;
    u.lastResultAt = t;
    const speaking = this.agent.speaking();
    if (speaking) u.overlapped = true;
    let free = entries;
    if (speaking && this.mode === "open") {
      const o = this.options;
      const agents = new Set(this.agent.wordsAround(o.echoBackMs, o.echoAheadMs).map(wordKey));
      free = entries.filter((entry) => !agents.has(entry.key));
    }
    const echoFree = free.length;
    const mine = free.filter((entry) => entry.confident && !isBackchannel(entry.key));
    const meant = mine.length; // "first-word"'s words
    const sure = mine.filter((entry) => entry.sure).length; // what ends a hold with a cut
    const text = String(result.text || "").trim();
    const partial = Boolean(result.partial);
    u.results.set(result.id, { text, words, partial, echoFree, meant, sure });
    if (!result.partial && text) u.lastFinal = text;
    if (this.state === "listening") this.setState("hearing");
    this.guard();
    if (u.held && !u.bargedIn && this.onlyBackchannels()) this.resume(); // no wait for the end
    this.show();
    this.tick();
  }

  /** The timers: the end of a turn, a cut at maxUtteranceMs, the wait after a release. */
  tick() {
    if (this.state === "idle") return;
    const t = this.now();
    const u = this.utterance;
    const o = this.options;
    if (this.state === "ending") {
      if (t - this.releasedAt >= o.releaseWaitMs) this.decide(false);
      return;
    }
    if (u.startedAt === null) return;
    if (t - u.startedAt >= o.maxUtteranceMs) {
      this.decide(true);
      return;
    }
    if (this.mode !== "open") return;
    if (u.held && !u.bargedIn && this.counts().meant === 0) {
      const voiceQuiet = t - (u.lastVoiceAt ?? u.heldAt);
      if (t - u.heldAt >= o.resumeAfterMs && voiceQuiet >= o.resumeAfterMs) this.resume();
    }
    const last = Math.max(u.startedAt, u.lastVoiceAt ?? -Infinity, u.lastResultAt ?? -Infinity);
    const quiet = t - last;
    const entries = [...u.results.values()];
    const pending = entries.some((entry) => entry.partial);
    const said = entries.some((entry) => !entry.partial && entry.text);
    const wait = soundsComplete(u.lastFinal) ? o.endOfTurnCompleteMs : o.endOfTurnIncompleteMs;
    if ((said && !pending && quiet >= wait) || quiet >= o.noWordsMs) this.decide(false);
  }

  /** What there is to see of the current utterance (for tests and the page's figures). */
  get snapshot() {
    const u = this.utterance;
    return {
      state: this.state,
      mode: this.mode,
      speechMs: u.speechMs,
      runMs: u.runMs,
      text: this.text(),
      overlapped: u.overlapped,
      passed: u.passed,
    };
  }

  // --- inside ------------------------------------------------------------------------------

  text() {
    return [...this.utterance.results.values()]
      .map((entry) => entry.text)
      .filter(Boolean)
      .join(" ");
  }

  counts() {
    let words = 0;
    let echoFree = 0;
    let meant = 0;
    let sure = 0;
    for (const entry of this.utterance.results.values()) {
      words += entry.words.length;
      echoFree += entry.echoFree;
      meant += entry.meant;
      sure += entry.sure;
    }
    return { words, echoFree, meant, sure };
  }

  /** Every result final, with words, none of them the person's own but backchannels (or the
   * agent's echo): what a hold waits to hear before the agent goes on. */
  onlyBackchannels() {
    const entries = [...this.utterance.results.values()];
    const { words, meant } = this.counts();
    return words > 0 && meant === 0 && entries.every((entry) => !entry.partial);
  }

  /** Has the person's speech passed the barge-in guard? Then hold the agent, or stop it. */
  guard() {
    const u = this.utterance;
    if (this.mode !== "open") return;
    const o = this.options;
    const { words, echoFree, meant, sure } = this.counts();
    const passing = !u.passed;
    if (passing) {
      const passed =
        o.bargeInOn === "first-word"
          ? meant > 0 && u.speechMs >= o.minSpeechMs
          : u.runMs >= o.bargeInMinSpeechMs && !(words > 0 && echoFree === 0);
      if (!passed) return;
      u.passed = true;
    }
    if (!u.bargedIn && this.agent.speaking()) {
      if (o.bargeInOn !== "speech" || sure > 0) {
        this.bargeIn(); // a word of the person's (in "speech", one the recogniser is sure of)
      } else if (!u.held && !u.resumed) {
        u.held = true; // enough voice, no word yet: the agent pauses while the recogniser decides
        u.heldAt = this.now();
        this.emit({ type: "hold" });
      }
    }
    if (passing) this.show(); // what was held back while it might have been echo or noise
  }

  bargeIn() {
    const u = this.utterance;
    u.bargedIn = true;
    u.held = false;
    this.emit({ type: "barge-in", reason: this.options.bargeInOn }); // first: silence at once
  }

  /** The hold was no barge-in: the agent goes on (the utterance is still judged as it ends). */
  resume() {
    const u = this.utterance;
    if (!u.held) return;
    u.held = false;
    u.resumed = true;
    this.emit({ type: "resume" });
  }

  /** The live line: hidden while it may be echo or noise over the agent's voice. */
  show() {
    const u = this.utterance;
    const hidden = this.mode === "open" && u.overlapped && !u.passed;
    const text = hidden ? "" : this.text();
    if (text === u.shown) return;
    u.shown = text;
    this.emit({ type: "heard", text, final: false });
  }

  /** The utterance is over: a turn, "didn't catch that", or dropped. */
  decide(cut) {
    const u = this.utterance;
    const o = this.options;
    const text = this.text();
    const { words, echoFree, meant } = this.counts();
    const open = this.mode === "open";
    let outcome;
    if (open && u.overlapped && !u.passed) {
      outcome = { type: "ignored", why: words > 0 && echoFree === 0 ? "echo" : "noise", text };
    } else if (open && u.overlapped && echoFree > 0 && meant === 0) {
      outcome = { type: "ignored", why: "backchannel", text }; // "Mm-hm." over the agent
    } else if (u.speechMs < o.minSpeechMs) {
      outcome = open
        ? { type: "ignored", why: text ? "no-voice" : "noise", text }
        : { type: "missed", why: "no-voice" };
    } else if (!text) {
      outcome = { type: "missed", why: "no-words" };
    } else if (open && u.overlapped && echoFree === 0) {
      outcome = { type: "ignored", why: "echo", text };
    } else {
      outcome = { type: "turn", text, cut };
    }
    const taken = outcome.type === "turn";
    if (u.held && taken) this.bargeIn();
    else if (u.held) this.resume();
    for (const id of u.results.keys()) this.done.add(id);
    this.utterance = freshUtterance();
    this.emit({ type: "heard", text: taken ? text : "", final: taken });
    this.emit(outcome);
    if (this.state === "ending") {
      this.mode = null;
      this.setState("idle");
    } else {
      this.setState("listening");
    }
  }

  setState(state) {
    if (state === this.state) return;
    this.state = state;
    this.emit({ type: "state", state });
  }

  emit(event) {
    this.on(event);
  }
}
