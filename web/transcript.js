// The answer's text as it streams, and which sentence is being heard.
//
// Two streams describe one answer: text_delta frames carry the model's text as written
// (markdown and all), sentence frames carry the chunks cut for speech (markdown stripped). The
// page shows the written text and marks each spoken sentence inside it, found by its letters
// and digits alone, so that stripped markup does not stop the match.
//
// Which audio belongs to which sentence is not in the audio frames. In bidi the next sentence's
// frame often arrives while the previous sentence's audio is still coming, so "the frames after
// a sentence frame" is not enough. What does tell: the speech server ends each chunk that ends
// a sentence with 0.25 s of exact digital silence (0.1 s after a clause), divided by the speed.
// A sentence whose end has no such mark (an early cut of the first words) is given the audio
// its length predicts, at the speaking rate measured on the sentences before it.

const SENTENCE_END = /[.!?…。！？]$/u;
const CLAUSE_END = /[,;:\-–—、]$/u;
const CLOSERS = /["'”’)\]*]+$/u;
const WORD_CHARACTER = /[\p{L}\p{N}]/u;

/** Seconds of silence the speech server puts after a chunk (chunk_plan.pause_after). */
export function pauseAfter(text) {
  const end = text.trimEnd().replace(CLOSERS, "");
  if (SENTENCE_END.test(end)) return 0.25;
  if (CLAUSE_END.test(end)) return 0.1;
  return 0;
}

/** Letters and digits, lower-cased, and where each one is in the original text. */
export function letters(text) {
  let flat = "";
  const where = [];
  for (let i = 0; i < text.length; i++) {
    const character = text[i];
    if (WORD_CHARACTER.test(character)) {
      flat += character.toLowerCase()[0];
      where.push(i);
    }
  }
  return { flat, where };
}

/** Where each sentence is in the written text: [{index, from, to}], in order, from the end of
 * the one before. A sentence not found whole is looked for as its first letters followed, in
 * order, by the rest (a link's address sits in the written text, not in the spoken one); one
 * not found at all (its text has not arrived yet) is left out. */
export function locate(written, sentences) {
  const { flat, where } = letters(written);
  const found = [];
  let cursor = 0;
  for (const sentence of sentences) {
    const wanted = letters(sentence.text).flat;
    if (!wanted) continue;
    let from = flat.indexOf(wanted, cursor);
    let to = from + wanted.length;
    if (from < 0) [from, to] = scattered(flat, wanted, cursor);
    if (from < 0) continue;
    let end = where[to - 1] + 1;
    while (end < written.length && TRAILING.test(written[end])) end += 1; // its "!" or "."
    found.push({ index: sentence.index, from: where[from], to: end });
    cursor = to;
  }
  return found;
}

const TRAILING = /[.,!?;:…"'”’)\]*_。！？]/u;

/** [from, to) of wanted in flat as a subsequence: its first 8 letters together, its last 4
 * together, the span at most half again its length (plus room for an address); [-1, -1]. */
function scattered(flat, wanted, cursor) {
  const from = flat.indexOf(wanted.slice(0, 8), cursor);
  if (from < 0) return [-1, -1];
  let at = from;
  for (const letter of wanted) {
    at = flat.indexOf(letter, at);
    if (at < 0) return [-1, -1];
    at += 1;
  }
  const whole = at - from <= 1.5 * wanted.length + 60;
  return whole && flat.slice(at - 4, at) === wanted.slice(-4) ? [from, at] : [-1, -1];
}

/** One turn's text: the deltas in seq order, the sentences, and the audio span of each. */
export class TurnText {
  constructor(speed = 1) {
    this.speed = speed;
    this.deltas = []; // by seq: they may arrive out of order
    this.sentences = []; // {index, text, start, end}: start/end in audio-context seconds
    this.audioSentence = -1; // the sentence the audio now arriving belongs to
    this.audioSeconds = 0; // of that sentence, so far
    this.boundary = false; // the audio so far ended where that sentence ends
  }

  get written() {
    return this.deltas.join("");
  }

  addDelta(seq, text) {
    this.deltas[seq] = text;
  }

  addSentence(index, text) {
    this.sentences[index] = { index, text, start: null, end: null };
  }

  /** A frame of this turn's audio was scheduled at [start, end) (context seconds), ending with
   * `silence` seconds of exact zeros. rate: seconds of speech per character, measured. */
  addAudio({ start, end, silence }, rate) {
    let measured = null;
    const next = this.sentences[this.audioSentence + 1];
    if ((this.audioSentence < 0 || this.boundary) && next) {
      // The sentence before ended on its pause: it measures the speaking rate for later ones.
      const done = this.sentences[this.audioSentence];
      const pause = done ? pauseAfter(done.text) / this.speed : 0;
      if (done && pause > 0 && done.text.length >= 8) {
        measured = ((this.audioSeconds - pause) * this.speed) / done.text.length;
      }
      this.audioSentence += 1;
      this.audioSeconds = 0;
      next.start = start;
    }
    const sentence = this.sentences[this.audioSentence];
    if (!sentence) return measured; // audio before any sentence frame: not expected
    sentence.end = end;
    this.audioSeconds += end - start;
    const expected = (sentence.text.length * rate) / this.speed;
    const pause = pauseAfter(sentence.text) / this.speed;
    this.boundary =
      pause > 0
        ? silence >= 0.8 * pause && this.audioSeconds >= 0.4 * expected
        : this.audioSeconds >= expected;
    return measured;
  }
}

/** Show a turn's text in element: the written text with its sentences marked, or (a speak
 * turn, which has no written text) the sentences themselves. */
export function renderText(element, turnText) {
  const written = turnText.written;
  const sentences = turnText.sentences.filter(Boolean);
  const parts = [];
  if (!written) {
    for (const sentence of sentences) {
      parts.push(sentenceSpan(sentence.index, sentence.text), document.createTextNode(" "));
    }
  } else {
    let at = 0;
    for (const { index, from, to } of locate(written, sentences)) {
      if (from > at) parts.push(document.createTextNode(written.slice(at, from)));
      parts.push(sentenceSpan(index, written.slice(from, to)));
      at = to;
    }
    if (at < written.length) parts.push(document.createTextNode(written.slice(at)));
  }
  element.replaceChildren(...parts);
}

function sentenceSpan(index, text) {
  const span = document.createElement("span");
  span.className = "sentence";
  span.dataset.index = String(index);
  span.textContent = text;
  return span;
}

/** Mark, in a rendered text, the sentence heard at context time t and those heard before it
 * (from the sentences' audio spans, so a re-render loses nothing). */
export function highlight(element, turnText, t) {
  for (const span of element.querySelectorAll(".sentence")) {
    const sentence = turnText.sentences[Number(span.dataset.index)];
    const started = Boolean(sentence) && sentence.start !== null && sentence.start <= t;
    span.classList.toggle("heard", started);
    span.classList.toggle("speaking", started && t < sentence.end);
  }
}
