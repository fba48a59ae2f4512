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
//
// Where the server sends word timings (words frames), each timed word is marked too, found in
// the shown text by its letters as sentences are; word_follower.js says which one is heard, and
// followWords() marks it, and at a cut (Stop, a barge-in) the words the listener never heard.
//
// Above the answer, the person's own line when they speak (renderUserLine): the live partial
// transcript while they talk, then what they said, once it is asked.

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

/** Where each timed word is in the shown text: [{index, from, to}], in order. A word is looked
 * for by its letters from the end of the one found before, at most WORD_REACH letters on (a
 * link's address sits between two spoken words in the written text, while a short word found
 * far ahead would be another's); one not found (its text has not arrived yet, a mark with no
 * letters) is left out, and the next is looked for from the same place. */
export function locateWords(text, words) {
  const { flat, where } = letters(text);
  const found = [];
  let cursor = 0;
  words.forEach((word, index) => {
    const wanted = letters(word.text).flat;
    if (!wanted) return;
    const ahead = flat.substring(cursor, cursor + WORD_REACH + wanted.length).indexOf(wanted);
    if (ahead < 0) return;
    const at = cursor + ahead;
    found.push({ index, from: where[at], to: where[at + wanted.length - 1] + 1 });
    cursor = at + wanted.length;
  });
  return found;
}

const WORD_REACH = 200;

let renders = 0; // followWords redoes its marks after each render (the spans are new)

/** Show a turn's text in element: the written text with its sentences marked, or (a speak
 * turn, which has no written text) the sentences themselves; each timed word of follower
 * (word_follower.js) in its own span, and, once the turn was cut, a mark where the listener
 * stopped hearing. */
export function renderText(element, turnText, follower = null) {
  const sentences = turnText.sentences.filter(Boolean);
  let text = turnText.written;
  let located;
  if (text) {
    located = locate(text, sentences);
  } else {
    located = [];
    for (const sentence of sentences) {
      if (text) text += " ";
      const from = text.length;
      text += sentence.text;
      located.push({ index: sentence.index, from, to: text.length });
    }
  }
  const words = follower ? locateWords(text, follower.words) : [];
  const cutAt = follower && follower.cutMs !== null ? cutOffset(text, words, follower) : null;
  const parts = [];
  let at = 0;
  const run = new Run(text, words, cutAt, follower && follower.cutMs);
  for (const { index, from, to } of located) {
    run.into(parts, at, from);
    const span = sentenceSpan(index);
    run.into(span, from, to);
    parts.push(span);
    at = to;
  }
  run.into(parts, at, text.length);
  element.replaceChildren(...parts);
  renders += 1;
}

/** Where, in the shown text, the listener stopped hearing: before the first timed word not
 * heard, else after the last one heard (and its closing marks). Null when no timed word is in
 * the text: without timings the page cannot tell. Text past it was never heard, timed or not
 * (bidi writes ahead of the voice: the sentences after the cut were never spoken). */
function cutOffset(text, words, follower) {
  const heard = follower.heardCount(follower.cutMs);
  const first = words.find((word) => word.index >= heard);
  if (first) return first.from;
  const last = words.at(-1);
  if (!last) return null;
  let end = last.to;
  while (end < text.length && TRAILING.test(text[end])) end += 1;
  return end;
}

/** The text between sentence marks, or inside one, with the timed words in it as spans; at a
 * cut, the mark where the listener stopped hearing, and what follows it as unheard. A word
 * that would straddle a sentence's edge (not expected: words are timed within a chunk) stays
 * plain text. */
class Run {
  constructor(text, words, cutAt, cutMs) {
    this.text = text;
    this.words = words;
    this.next = 0; // the first word not placed yet
    this.cutAt = cutAt; // null: not cut
    this.cutMs = cutMs;
    this.marked = false;
  }

  into(target, from, to) {
    const add = (node) => (Array.isArray(target) ? target.push(node) : target.append(node));
    const { text, words } = this;
    while (this.next < words.length && words[this.next].from < from) this.next += 1;
    let cursor = from;
    while (this.next < words.length && words[this.next].to <= to) {
      const word = words[this.next];
      this.next += 1;
      this.plain(add, cursor, word.from);
      const span = document.createElement("span");
      span.className = "word";
      span.dataset.word = String(word.index);
      span.textContent = text.slice(word.from, word.to);
      if (this.cutAt !== null && word.from >= this.cutAt) {
        this.mark(add);
        span.classList.add("unheard");
      }
      add(span);
      cursor = word.to;
    }
    this.plain(add, cursor, to);
  }

  /** Text [from, to) outside the words: split at the cut, the part after it unheard. */
  plain(add, from, to) {
    if (to <= from) return;
    const cutAt = this.cutAt;
    if (cutAt === null || to <= cutAt) {
      add(document.createTextNode(this.text.slice(from, to)));
      return;
    }
    if (from < cutAt) add(document.createTextNode(this.text.slice(from, cutAt)));
    this.mark(add);
    const span = document.createElement("span");
    span.className = "unheard";
    span.textContent = this.text.slice(Math.max(from, cutAt), to);
    add(span);
  }

  /** The mark where the listener stopped hearing, once. Its words are in CSS (::after), so
   * the text read or copied stays the answer's. */
  mark(add) {
    if (this.marked) return;
    this.marked = true;
    const mark = document.createElement("span");
    mark.className = "cut-mark";
    mark.setAttribute("role", "separator");
    mark.setAttribute("aria-label", `the listener stopped hearing here, at ${this.cutMs} ms`);
    mark.dataset.heardMs = String(this.cutMs);
    add(mark);
  }
}

/** Mark, in a rendered text, the word heard at stream position ms (none once the turn was
 * cut: renderText marks the cut). Cheap when nothing changed: it runs once a frame. */
export function followWords(element, follower, ms) {
  const speaking = follower.cutMs !== null ? -1 : follower.wordAt(ms);
  const key = `${renders}:${speaking}`;
  if (element.dataset.followed === key) return;
  element.dataset.followed = key;
  let shown = null;
  for (const span of element.querySelectorAll(".word")) {
    const index = Number(span.dataset.word);
    span.classList.toggle("speaking", index === speaking);
    if (index === speaking) shown = span;
  }
  if (shown) keepInView(element, shown);
}

/** Scroll the transcript box (not the page) so that the word being heard stays in sight. */
function keepInView(box, span) {
  const top = span.offsetTop;
  const bottom = top + span.offsetHeight;
  if (top < box.scrollTop || bottom > box.scrollTop + box.clientHeight) {
    box.scrollTop = Math.max(0, top - box.clientHeight / 3);
  }
}

function sentenceSpan(index) {
  const span = document.createElement("span");
  span.className = "sentence";
  span.dataset.index = String(index);
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

/** The person's line above the answer (speech in): while they speak, what the recogniser
 * hears so far (partial: its last words may still change); once their turn is asked, what they
 * said. line: {text, final}, or null for none. */
export function renderUserLine(element, line) {
  const text = line ? line.text : "";
  const state = !text ? "none" : line.final ? "final" : "partial";
  if (element.dataset.line === state && (element.lastChild?.textContent ?? "") === text) return;
  element.dataset.line = state;
  element.hidden = !text;
  if (!text) {
    element.replaceChildren();
    return;
  }
  const who = document.createElement("span");
  who.className = "who";
  who.textContent = line.final ? "you said" : "hearing";
  const said = document.createElement("span");
  said.className = "said";
  said.textContent = text;
  element.replaceChildren(who, said);
}
