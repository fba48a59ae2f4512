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
// (no voice, no result) for endOfTurnMs. The final texts of the utterance, joined, are the
// prompt. Voice with no words for noWordsMs is "didn't catch that"; words with (almost) no voice
// under them are not a turn (a recogniser's guess at silence or noise: Whisper is known to
// "hear" a "Thank you." in silence). An utterance longer than maxUtteranceMs is cut there: what
// was said so far is asked, and the page says so.
//
// Barge-in, while the agent's voice plays: the agent is stopped at once (app.js's Stop path,
// which sends cancel with heard_ms) only when the person's speech passes a guard, else a cough,
// an "mm-hm" or the agent's own voice coming back through the microphone would cut it off:
//   bargeInOn "speech": bargeInMinSpeechMs of voice in one run (pauses shorter than runGapMs
//     do not break a run); fast, before any word is recognised;
//   bargeInOn "first-word": the first word recognised (a partial's, stable or not).
// Echo guard: words recognised while the agent speaks that are among the agent's own words
// played around that moment (echoBackMs before the word being heard, echoAheadMs after; the
// words frames say which) are its echo: they never pass the guard, and an utterance made of
// them only is never asked. An utterance that overlapped the agent's voice and did not pass the
// guard is dropped whole, its words too: a backchannel is not a question. (In "speech" mode an
// echo loud enough to get past the browser's echo canceller can pass on voice alone before any
// word is recognised: "first-word" is the safer mode on loudspeakers, at the cost of waiting
// for the recogniser.)
//
// Every threshold is in LISTENING, the one place to change them (or pass options to TurnTaking).
// Push-to-talk (Space held) is a person taking the floor on purpose: it stops the agent at once,
// with no guard, and its turn ends when the key is released.

export const LISTENING = Object.freeze({
  endOfTurnMs: 700,
  maxUtteranceMs: 30_000,
  bargeInOn: "speech", // or "first-word"
  bargeInMinSpeechMs: 250,
  runGapMs: 300,
  minSpeechMs: 150, // an utterance with less voice is not a turn
  noWordsMs: 3000, // voice or a partial, then nothing new for this long: decided as it stands
  releaseWaitMs: 4000, // push-to-talk: the longest wait for the last results after release
  echoBackMs: 3000, // recognition lags the voice: the agent's words this far back may echo
  echoAheadMs: 500,
});

const BARGE_IN_ON = ["speech", "first-word"];

/** A word's letters and digits, lower-cased: how recognised words and the agent's are compared. */
export function wordKey(text) {
  return String(text)
    .toLowerCase()
    .replace(/[^\p{L}\p{N}]+/gu, "");
}

/** The words of a result (transcribe_stream.js's shape): its items' words, else its text's. */
export function resultWords(result) {
  const items = (result.items || []).filter((item) => item.type !== "punctuation");
  const words = items.length
    ? items.map((item) => item.content)
    : String(result.text || "").split(/\s+/);
  return words.map(wordKey).filter(Boolean);
}

function freshUtterance() {
  return {
    startedAt: null, // the first voice or result
    speechMs: 0, // voice, in all
    runMs: 0, // voice in the current run
    lastVoiceAt: null,
    lastResultAt: null,
    results: new Map(), // id -> {text, words, partial, echoFree}: in the order they began
    overlapped: false, // the agent's voice played during it
    passed: false, // the barge-in guard passed
    bargedIn: false, // ...and the agent was stopped for it
    shown: "",
  };
}

export class TurnTaking {
  /** now(): ms (performance.now, or a test's clock); agent: {speaking(): bool, wordsAround(backMs,
   * aheadMs): [word texts]}; options: LISTENING's, any of them; on(event): what happened:
   *   {type: "state", state}
   *   {type: "heard", text, final}: the utterance so far (final: the turn's text; "": nothing)
   *   {type: "barge-in", reason}: stop the agent now ("speech", "first-word", "push")
   *   {type: "turn", text, cut}: ask this (cut: the utterance reached maxUtteranceMs)
   *   {type: "missed", why}: "didn't catch that" ("no-words": voice, no words; "no-voice":
   *     push-to-talk with nothing said)
   *   {type: "ignored", why, text}: dropped without a word ("echo", "noise", "no-voice") */
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

  /** Stop listening: what was being said is dropped. */
  stop() {
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

  /** A chunk of the microphone's audio: {ms, voiceMs}. */
  audio({ voiceMs = 0 }) {
    if (this.state === "idle" || this.state === "ending") return;
    const t = this.now();
    const u = this.utterance;
    if (voiceMs > 0) {
      if (u.startedAt === null) u.startedAt = t;
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
    const words = resultWords(result);
    if (!words.length && !u.results.has(result.id)) return; // nothing heard yet
    const t = this.now();
    if (u.startedAt === null) u.startedAt = t;
    u.lastResultAt = t;
    const speaking = this.agent.speaking();
    if (speaking) u.overlapped = true;
    let echoFree = words.length;
    if (speaking && this.mode === "open") {
      const o = this.options;
      const agents = new Set(this.agent.wordsAround(o.echoBackMs, o.echoAheadMs).map(wordKey));
      echoFree = words.filter((word) => !agents.has(word)).length;
    }
    const text = String(result.text || "").trim();
    u.results.set(result.id, { text, words, partial: Boolean(result.partial), echoFree });
    if (this.state === "listening") this.setState("hearing");
    this.guard();
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
    const last = Math.max(u.startedAt, u.lastVoiceAt ?? -Infinity, u.lastResultAt ?? -Infinity);
    const quiet = t - last;
    const entries = [...u.results.values()];
    const pending = entries.some((entry) => entry.partial);
    const said = entries.some((entry) => !entry.partial && entry.text);
    if ((said && !pending && quiet >= o.endOfTurnMs) || quiet >= o.noWordsMs) this.decide(false);
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
    for (const entry of this.utterance.results.values()) {
      words += entry.words.length;
      echoFree += entry.echoFree;
    }
    return { words, echoFree };
  }

  /** Has the person's speech passed the barge-in guard? Then stop the agent if it speaks. */
  guard() {
    const u = this.utterance;
    if (this.mode !== "open") return;
    const passing = !u.passed;
    if (passing) {
      const o = this.options;
      const { words, echoFree } = this.counts();
      const passed =
        o.bargeInOn === "first-word"
          ? echoFree > 0
          : u.runMs >= o.bargeInMinSpeechMs && !(words > 0 && echoFree === 0);
      if (!passed) return;
      u.passed = true;
    }
    if (!u.bargedIn && this.agent.speaking()) {
      u.bargedIn = true;
      this.emit({ type: "barge-in", reason: this.options.bargeInOn }); // first: silence at once
    }
    if (passing) this.show(); // what was held back while it might have been echo or noise
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
    const { words, echoFree } = this.counts();
    const open = this.mode === "open";
    let outcome;
    if (open && u.overlapped && !u.passed) {
      outcome = { type: "ignored", why: words > 0 && echoFree === 0 ? "echo" : "noise", text };
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
    for (const id of u.results.keys()) this.done.add(id);
    this.utterance = freshUtterance();
    const taken = outcome.type === "turn";
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
