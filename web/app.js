// The page: connect, ask, hear the answer as it is written, and see where each turn's time
// went. The modules beside this one hold the parts: connection.js (the WebSocket), player.js
// (Web Audio), transcript.js (the text and the sentence or word being heard), word_follower.js
// (which word is heard, from the word timings and the audio clock), memory.js (what the agent
// will remember), timeline.js (the chart), speech_in.js (the microphone to Amazon Transcribe,
// when a spoken turn ends, barge-in), page_stats.js (what the page did, read-only, for tests
// and benches).

import { Link } from "./connection.js";
import { Player, SAMPLE_RATE } from "./player.js";
import { TurnText, followWords, highlight, renderText, renderUserLine } from "./transcript.js";
import { WordFollower } from "./word_follower.js";
import { Memory } from "./memory.js";
import { drawTimeline } from "./timeline.js";
import { stepLevels } from "./listening.js";
import { speechIn } from "./speech_in.js";
import { publishPageStats } from "./page_stats.js";

const $ = (id) => document.getElementById(id);
const STORAGE_KEY = "voicewire.url";
// The API (URL without its ticket) whose binary audio frames arrived here as text frames: the
// next Connect to it asks for base64 at once.
const TEXT_FRAMES_KEY = "voicewire.textFrames";
const DEFAULT_RATE = 0.06; // seconds of speech per character at speed 1, until measured
const TIMELINE_EVERY_MS = 100; // redraw the chart at most this often while a turn streams
// After Stop on a turn the server has already ended (its audio was still playing here), the
// history is asked for this long after the cancel: the local stack and API Gateway handle a
// connection's messages concurrently, so one sent at once could be answered before the cut.
const HISTORY_AFTER_CUT_MS = 500;

// What to do about a server error, where its message alone may not say (docs/protocol.md).
const HINTS = {
  too_many_turns: "Wait a minute before asking again.",
  speech_limit_reached: "The answer reached the spoken-audio limit of a turn.",
  llm_throttled: "The model is throttled: wait a moment and ask again.",
  speech_failed: "The speech service failed: ask again.",
  speech_busy: "The speech engine is speaking as many answers as it can: ask again in a moment.",
  turn_timed_out: "The turn ran out of time: ask for a shorter answer.",
  state_unavailable: "The session store is busy: ask again.",
};

// --- settings: in this page's own address (after #) and local storage, nowhere else ---------

/** The URL this page's own server would have: the local stack serves its API at /ws. */
function derivedUrl() {
  if (location.protocol === "https:") return `wss://${location.host}/ws`;
  if (location.protocol === "http:") return `ws://${location.host}/ws`;
  return ""; // opened as a file: the URL must be given
}

function loadSettings() {
  const hash = new URLSearchParams(location.hash.slice(1));
  let stored = "";
  try {
    stored = localStorage.getItem(STORAGE_KEY) || "";
  } catch {
    // storage may be off (a private window): the address still keeps them
  }
  const legacy = new URLSearchParams(location.search).get("ws"); // the old page's ?ws=
  const given = hash.get("url") || legacy || stored;
  $("url").value = given || derivedUrl();
  $("token").value = hash.get("token") || "";
  $("base64").checked = hash.get("audio") === "base64";
  readHostsConfig(given);
}

/** What the host that served the page says of its API, in config.json beside the page:
 * {"url": "ws(s)://...", "tickets": true | false, "ticket_url": "..."}. The local stack answers
 * it (voicewire_tools/local_stack/gateway.py), the VoicePage stack writes one; a plain static
 * host has none (then the page's own /ws stays, and nothing happens by itself).
 * url: the API, offered unless the person gave one (in the address or local storage).
 * tickets: false, connecting needs no ticket, so the page connects at once, unless the person
 *   chose another API; true, it needs one, which the page cannot mint: it says so and waits;
 *   missing (an older config.json), unknown: it waits for Connect, as a ticketed API needs.
 * ticket_url: where a ticket is minted (POST, with an API key), where the host mints them.
 * Nothing happens if the person acted while it was fetched (typed a URL, pressed Connect). */
async function readHostsConfig(given) {
  const before = $("url").value;
  let config;
  try {
    const response = await fetch("config.json", { cache: "no-store" });
    if (!response.ok) return;
    config = await response.json();
  } catch {
    return; // no config, or not JSON: nothing to offer
  }
  const url = typeof config?.url === "string" ? config.url : "";
  if (!url || $("url").value !== before || $("status").dataset.state !== "idle") return;
  if (!given) $("url").value = url;
  if (given && given !== url) return; // the person chose another API: theirs to connect to
  if (config.tickets === false) {
    connectNow();
  } else if (config.tickets === true) {
    showState({ state: "idle", text: `not connected: ${ticketNeeded(config.ticket_url)}` });
  }
}

/** What to do to connect to an API that needs a connect ticket. */
function ticketNeeded(ticketUrl) {
  if ($("token").value.trim()) {
    return "this API needs a connect ticket: press Connect to use the one in Ticket.";
  }
  const where =
    typeof ticketUrl === "string" && ticketUrl
      ? `mint one with POST ${ticketUrl} and the API key (the "tickets" line that ` +
        "voicewire up printed)"
      : "get one from the application's backend (or agent-infra token)";
  return (
    `this API needs a connect ticket: ${where}, paste it in Ticket and press Connect ` +
    "(each ticket opens one connection within 2 minutes)."
  );
}

function saveSettings() {
  const { url, token, base64 } = settings();
  const hash = new URLSearchParams();
  const own = url === derivedUrl();
  if (!own) hash.set("url", url);
  if (token) hash.set("token", token);
  if (base64) hash.set("audio", "base64");
  const fragment = hash.toString();
  const address = location.pathname + location.search + (fragment ? `#${fragment}` : "");
  history.replaceState(null, "", address);
  try {
    if (own) localStorage.removeItem(STORAGE_KEY);
    else localStorage.setItem(STORAGE_KEY, url);
  } catch {
    // as above
  }
}

/** The API a URL names, for remembering what it does: without its ticket or audio choice. */
function apiOf(url) {
  try {
    const parsed = new URL(url);
    parsed.searchParams.delete("token");
    parsed.searchParams.delete("audio");
    return parsed.href;
  } catch {
    return url;
  }
}

/** This browser found this API to deliver binary audio frames as text frames. */
function deliversText(url) {
  try {
    return localStorage.getItem(TEXT_FRAMES_KEY) === apiOf(url);
  } catch {
    return false;
  }
}

function settings() {
  return {
    url: $("url").value.trim(),
    token: $("token").value.trim(),
    base64: $("base64").checked,
  };
}

// --- state -------------------------------------------------------------------------------

const player = new Player();
const turns = []; // this session's, oldest first
let current = null; // the turn whose audio plays: only its frames are scheduled
let awaiting = null; // asked for, its turn_start not seen yet
let shown = null; // the turn the answer, figures and chart show
let rate = DEFAULT_RATE;
let framesDropped = 0;
let lastTurnNumber = null;
let made = 0;
let dirty = false; // the figures, text or history changed
let chartDirty = false; // the chart too (redrawn at most every TIMELINE_EVERY_MS)
let drawnAt = 0;
let wasPlaying = false;
let resend = null; // a turn cut by a fallback to base64: asked again once the link reopens

const link = new Link({
  settings,
  onState: showState,
  onFrame: handleFrame,
  onOpen: () => {
    link.send({ action: "voices" });
    if (resend) askAgain();
  },
  onTextFrames: fallBackToBase64,
});

// What the agent will remember: asked for after each turn, shown in its own panel.
const memory = new Memory({
  list: $("memory"),
  note: $("memory-note"),
  refresh: $("memory-refresh"),
  ask: () => link.send({ action: "history" }),
});

// Speech in: what it asks of the page is the turn that plays and Stop's and Ask's paths.
const listening = speechIn({
  link,
  player,
  changed,
  agent: {
    turn: () => current,
    heardMs: position,
    hold: holdTurn,
    resume: resumeTurn,
    stop,
    ask: (text) => start("ask", text),
  },
});
const { speech, echoGate } = listening;

publishPageStats({
  page: {
    current: () => current,
    lastTurnNumber: () => lastTurnNumber,
    framesDropped: () => framesDropped,
    shown: () => shown,
    heardMs: position,
  },
  player,
  listening,
});

function newTurn(kind, text) {
  const speed = Number($("speed").value);
  made += 1;
  return {
    id: `web-${Date.now().toString(36)}-${made}`, // our turn_id: ties turn_start to this click
    kind,
    mode: kind === "speak" ? "speak" : $("mode").value,
    voice: $("voice").value,
    speed,
    prompt: text,
    clickAt: performance.now(),
    number: null,
    status: "sent",
    ended: false, // its turn_end (or a refusal) came
    stopped: false, // Stop or a barge-in: its frames are dropped from now on
    ...received(speed),
    error: "",
  };
}

/** What a turn has received and measured so far: nothing yet. */
function received(speed) {
  return {
    text: new TurnText(speed),
    deltas: [],
    sentences: [],
    frames: [],
    playback: [],
    tools: [], // {id, name, from, to, status}: each tool call, ms from the click
    follower: new WordFollower(), // its word timings, its audio on the clock, where it was cut
    ahead: [], // {start, end, levels}: its frames as scheduled (context s), for a resume
    hold: null, // paused for a barge-in that may be a backchannel: {at, frames} (holdTurn)
    marks: {},
    server: {},
    audioSeconds: 0,
    stalls: 0,
  };
}

const since = (turn) => performance.now() - turn.clickAt;
const byId = (id) => turns.find((turn) => turn.id === id) || null;

function mark(turn, name) {
  if (turn.marks[name] == null) turn.marks[name] = since(turn);
}

/** Ms of a turn's audio heard: frozen where the listener cut it; live, from the audio clock,
 * while it is the turn playing (-1 before its first frame starts); all of it otherwise. */
function position(turn) {
  const follower = turn.follower;
  if (follower.cutMs !== null) return follower.cutMs;
  if (turn === current) return follower.positionAt(player.heardTime);
  return follower.streamMs;
}

/** The listener stops hearing a turn (Stop, or a barge-in): freeze what was heard, for the
 * transcript's cut and the heard_ms the server is told. Call before player.stop(). */
function cut(turn) {
  if (turn.follower.cutMs !== null) return turn.follower.cutMs;
  return turn.follower.cut(Math.max(0, position(turn)));
}

// --- actions -------------------------------------------------------------------------------

/** Ask (or speak) what the prompt says, or `spoken`: the words of a spoken turn (speech in). */
function start(kind, spoken = null) {
  const text = spoken ?? $("prompt").value.trim();
  if (!text) {
    showError("Type a prompt (or the text to speak) first.");
    $("prompt").focus();
    return;
  }
  if (!link.isOpen) {
    showError("Not connected: press Connect first.");
    return;
  }
  player.ensureContext(); // in the click itself: browsers let audio start only from a gesture
  // A new turn while one plays is a barge-in: the server cancels the old one; here it goes
  // silent at once and its late frames are dropped.
  // A turn that has ended and been heard to its end is not "stopped": nothing of it was cut.
  // One cut tells the server how much of it was heard (heard_ms), even if the server had
  // ended it: the agent is to remember only what reached the listener.
  const previous = awaiting || current;
  let heard = null;
  if (previous && (!previous.ended || player.playing > 0)) {
    heard = cut(previous);
    previous.stopped = true;
  }
  player.stop();
  echoGate.silenced(performance.now());
  current = null;
  const turn = newTurn(kind, text);
  turn.spoken = spoken !== null;
  turns.push(turn);
  awaiting = turn;
  shown = turn;
  const message =
    kind === "ask" ? { action: "ask", prompt: text, mode: turn.mode } : { action: "speak", text };
  if (turn.voice) message.voice = turn.voice;
  if (turn.speed !== 1) message.speed = turn.speed;
  message.turn_id = turn.id;
  if (heard !== null) message.heard_ms = heard;
  turn.message = message; // kept: a fallback to base64 asks it again
  link.send(message);
  showError("");
  changed();
}

function stop() {
  const turn = current || awaiting;
  const heard = turn ? cut(turn) : 0; // from the audio clock, before it goes silent
  if (turn) turn.hold = null; // its held frames are never heard
  player.stop(); // silent now, whatever the server does next
  echoGate.silenced(performance.now());
  if (turn) {
    turn.stopped = true;
    // A turn the server has ended may still be playing here (bidi's audio comes faster than
    // it plays): it is cancelled all the same, so that the server hears what was heard. It
    // cuts the history to that and answers nothing (an older server: unknown_turn, not shown).
    link.send({ action: "cancel", turn_id: turn.id, heard_ms: heard });
    if (!turn.ended) turn.status = "stopping";
    else setTimeout(() => memory.ask(), HISTORY_AFTER_CUT_MS); // no turn_end will come
  }
  current = null;
  awaiting = null;
  changed();
}

/** A barge-in that may be a backchannel (listening.js's hold): the turn pauses where it is
 * heard (the audio clock stops: the heard position, the highlight and heard_ms wait with it);
 * its frames that come meanwhile are kept, not scheduled. */
function holdTurn(turn) {
  if (turn.hold) return;
  turn.hold = { at: performance.now(), heardMs: since(turn), frames: [] };
  player.pause();
  echoGate.silenced(performance.now()); // the paused audio makes no echo
  changed();
}

/** It was no barge-in: the turn goes on from where it paused. Once the audio clock runs again,
 * the echo gate is told when the audio already scheduled will be heard now, the playback
 * timeline is shifted by the pause, and the frames kept meanwhile are scheduled in order. */
async function resumeTurn(turn) {
  const hold = turn.hold;
  await player.resume();
  if (turn.hold !== hold || turn !== current || turn.stopped) return; // cut meanwhile
  const now = player.context.currentTime;
  const stepS = echoGate.options.stepMs / 1000;
  for (const ahead of turn.ahead) {
    if (ahead.end <= now) continue;
    const skip = Math.max(0, Math.floor((now - ahead.start) / stepS));
    echoGate.played(player.heardAt(ahead.start + skip * stepS), ahead.levels.slice(skip));
  }
  const pausedMs = since(turn) - hold.heardMs;
  turn.playback = turn.playback.flatMap(([from, to]) => {
    if (to <= hold.heardMs) return [[from, to]];
    if (from >= hold.heardMs) return [[from + pausedMs, to + pausedMs]];
    return [
      [from, hold.heardMs],
      [hold.heardMs + pausedMs, to + pausedMs],
    ];
  });
  turn.hold = null;
  for (const [frame, arrived] of hold.frames) handleAudio(frame, arrived);
  changed();
}

// --- binary audio delivered as text frames -------------------------------------------------
//
// A gateway that posts raw bytes as text frames turns the first binary audio frame of a turn into
// a text frame that is not UTF-8, and the browser fails the connection (connection.js,
// binaryArrivedAsText). The page then switches to base64 audio, reconnects at once and asks the
// cut turn again, with the same turn_id. Why after the fact and not a probe before the first
// turn: where binary frames work (the local stack, a deployment agent-infra check proved) that
// costs nothing, and a deployed API sends base64 by default anyway; a probe would cost a whole
// turn's first audio on every connection. Where they do not, the cut turn had its first text
// and no audio, so nothing heard is lost, and the detour (its first audio, a reconnect) is paid
// once: the page keeps base64 ticked, in its address and, for this API, in local storage.

function fallBackToBase64() {
  const turn = [awaiting, current].find((t) => t && !t.ended && !t.stopped) || null;
  awaiting = null;
  current = null;
  $("base64").checked = true; // what the link reconnects with, from now on
  saveSettings();
  try {
    localStorage.setItem(TEXT_FRAMES_KEY, apiOf(settings().url));
  } catch {
    // storage may be off: the page's address still says base64
  }
  $("notice").textContent =
    "Binary audio frames arrive from this API as text frames, which the browser refuses: " +
    "switched to base64 audio" +
    (turn ? ", and the question is asked again." : ".");
  if (turn) {
    restart(turn);
    resend = turn;
  }
  changed();
}

/** Forget what the cut attempt of a turn received; its click time stays, so the figures from
 * the click (first audio heard) include what the detour cost. */
function restart(turn) {
  Object.assign(turn, {
    number: null,
    status: "asking again",
    delivery: undefined,
    ...received(turn.speed),
  });
}

function askAgain() {
  const turn = resend;
  resend = null;
  if (turn.stopped || awaiting || current) return;
  awaiting = turn;
  turn.status = "sent";
  link.send(turn.message);
  changed();
}

// --- frames --------------------------------------------------------------------------------

function handleFrame(frame) {
  switch (frame.type) {
    case "audio":
      return handleAudio(frame);
    case "turn_start":
      return handleStart(frame);
    case "text_delta":
      return handleText(frame, (turn) => {
        turn.text.addDelta(frame.seq, frame.text);
        turn.deltas.push(since(turn));
        mark(turn, "text");
      });
    case "sentence":
      return handleText(frame, (turn) => {
        turn.text.addSentence(frame.index, frame.text);
        turn.sentences.push(since(turn));
        mark(turn, "sentence");
      });
    case "words":
      return handleText(frame, (turn) => turn.follower.addWords(frame.words));
    case "tool_start":
      return handleText(frame, (turn) => {
        turn.tools.push({ id: frame.tool_use_id, name: frame.name, from: since(turn) });
      });
    case "tool_end":
      return handleText(frame, (turn) => {
        const call = turn.tools.find((t) => t.id === frame.tool_use_id);
        if (call) Object.assign(call, { to: since(turn), status: frame.status });
      });
    case "turn_end":
      return handleEnd(frame);
    case "error":
      return handleError(frame);
    case "voices":
      return showVoices(frame);
    case "history":
      memory.show(frame, lastTurnNumber);
      return changed();
    case "listen":
      return listening.offered(frame);
    case "unreadable":
      return showError(`The server sent ${frame.detail}; it was ignored.`);
    default:
      return undefined; // a frame type this page does not know: newer servers may add some
  }
}

function handleStart(frame) {
  const turn = byId(frame.turn_id);
  if (!turn) return;
  turn.number = frame.turn;
  // Binary frames, or base64 text frames: as the connection asked, else the API's default
  // (a deployed API sends base64 until its deployment is checked to carry binary frames).
  turn.delivery = frame.audio ? frame.audio.delivery : undefined;
  if (turn === awaiting) {
    awaiting = null;
    current = turn;
    turn.status = "running";
    lastTurnNumber = frame.turn;
    player.startTurn();
  } else if (turn.stopped && !turn.ended) {
    // Stopped before the server had it: the first cancel found no turn, so cancel it now.
    link.send({ action: "cancel", turn_id: turn.id, heard_ms: turn.follower.cutMs ?? 0 });
  }
  changed();
}

function handleText(frame, record) {
  const turn = byId(frame.turn_id);
  if (!turn || turn.stopped) return;
  record(turn);
  changed();
}

function handleAudio(frame, arrived = null) {
  const turn = current;
  // Only the current turn is heard: frames of a stopped or replaced turn are dropped.
  if (!turn || turn.stopped || frame.turn !== turn.number) {
    framesDropped += 1;
    return;
  }
  if (turn.hold) {
    turn.hold.frames.push([frame, since(turn)]); // scheduled when it goes on (resumeTurn)
    return;
  }
  arrived ??= since(turn);
  const scheduled = player.schedule(frame.pcm);
  if (!scheduled) return;
  const levels = stepLevels(frame.pcm, SAMPLE_RATE);
  echoGate.played(player.heardAt(scheduled.start), levels);
  turn.ahead.push({ start: scheduled.start, end: scheduled.end, levels });
  while (turn.ahead[0].end < scheduled.start - 1) turn.ahead.shift(); // long heard
  turn.frames.push(arrived);
  mark(turn, "frame");
  if (scheduled.stalled) turn.stalls += 1;
  turn.follower.addAudio(scheduled);
  const seconds = scheduled.end - scheduled.start;
  turn.audioSeconds += seconds;
  const from = player.heardAt(scheduled.start) - turn.clickAt;
  const to = from + seconds * 1000;
  const last = turn.playback.at(-1);
  if (last && from - last[1] < 2) last[1] = to;
  else turn.playback.push([from, to]);
  if (turn.marks.heard == null) turn.marks.heard = from;
  const measured = turn.text.addAudio(scheduled, rate);
  if (measured) rate = Math.min(0.15, Math.max(0.03, 0.7 * rate + 0.3 * measured));
  changed();
}

function handleEnd(frame) {
  const turn = byId(frame.turn_id);
  if (!turn || turn.ended) return; // a second turn_end (a retried worker's) changes nothing
  turn.ended = true;
  turn.status = frame.status;
  turn.server = frame.timings || {};
  turn.marks.end = since(turn);
  if (turn === awaiting) awaiting = null;
  memory.ask(); // the server keeps the history before it sends turn_end: this is the new one
  changed();
}

function handleError(frame) {
  const turn = frame.turn_id ? byId(frame.turn_id) : null;
  if (frame.code === "unknown_turn" && turn && turn.stopped) return; // our cancel met its end
  if (memory.refused(frame)) return; // an API without "history": the panel says so
  if (listening.listenRefused(frame)) return; // said beside the microphone
  const hint = HINTS[frame.code] ? ` ${HINTS[frame.code]}` : "";
  const text = `${frame.code}: ${frame.message}${hint}`;
  if (turn) {
    turn.error = text;
    if (turn === awaiting) {
      // Refused before it started (bad input, a limit): no turn_start or turn_end follows.
      awaiting = null;
      turn.ended = true;
      turn.status = "refused";
    }
  }
  showError(text);
  changed();
}

// The answer to {"action": "voices"}: grouped by language, English first, the default chosen
// (or the voice already chosen, when the list comes again after a reconnect).
function showVoices(frame) {
  const select = $("voice");
  const chosen = select.value;
  const groups = new Map();
  for (const voice of frame.voices) {
    if (!groups.has(voice.label)) {
      const group = document.createElement("optgroup");
      group.label = voice.label;
      groups.set(voice.label, group);
    }
    const name = voice.name + (voice.gender ? ` (${voice.gender})` : "");
    groups.get(voice.label).append(new Option(name, voice.name));
  }
  select.replaceChildren(...groups.values());
  const names = frame.voices.map((voice) => voice.name);
  select.value = names.includes(chosen) ? chosen : frame.default_voice;
}

// --- showing -------------------------------------------------------------------------------

function showState({ state, text }) {
  const status = $("status");
  status.textContent = text;
  status.dataset.state = state;
  if (state !== "open") {
    // Frames of a turn in flight are lost with the connection: say so in its history row.
    for (const turn of [awaiting, current]) {
      if (turn && !turn.ended) {
        turn.ended = true;
        turn.status = "connection lost";
      }
    }
    awaiting = null;
    listening.rejectOffers(`the connection is ${state === "error" ? "in error" : state}`);
    if (speech.mode) listening.stopListening("Listening stopped: the connection closed.");
  }
  changed();
}

function showError(text) {
  $("error").textContent = text;
}

const ms = (value) => (value == null ? "–" : `${Math.round(value)} ms`);

function changed() {
  dirty = true;
}

function render() {
  const open = link.isOpen;
  $("ask").disabled = !open;
  $("speak").disabled = !open;
  const state = $("status").dataset.state;
  $("disconnect").disabled = !["open", "connecting", "reconnecting"].includes(state);
  const active = (current && (!current.ended || player.playing > 0)) || awaiting;
  $("cancel").disabled = !active;
  memory.render(open);
  listening.renderMicrophone(open);

  const turn = shown;
  const marks = turn ? turn.marks : {};
  const server = turn ? turn.server : {};
  $("ttfa").textContent = marks.heard == null ? "–" : String(Math.round(marks.heard));
  $("page-text").textContent = ms(marks.text);
  $("page-sentence").textContent = ms(marks.sentence);
  $("page-frame").textContent = ms(marks.frame);
  $("page-heard").textContent = ms(marks.heard);
  $("page-total").textContent = ms(marks.end);
  $("server-text").textContent = ms(server.first_text_ms);
  $("server-sentence").textContent = ms(server.first_sentence_ms);
  $("server-audio").textContent = ms(server.first_audio_ms);
  $("server-total").textContent = ms(server.total_ms);
  $("page-audio").textContent = turn
    ? `${turn.audioSeconds.toFixed(1)} s in ${turn.frames.length} frames, ` +
      `${turn.stalls} ${turn.stalls === 1 ? "stall" : "stalls"}`
    : "–";
  $("turn-summary").textContent = turn
    ? `turn ${turn.number ?? "…"}, ${turn.mode}, ${turn.status}` +
      (turn.voice ? `, ${turn.voice}` : "") +
      (turn.speed !== 1 ? `, ${turn.speed.toFixed(2)}×` : "") +
      (turn.delivery ? `, ${turn.delivery} audio frames` : "") +
      working(turn)
    : "";
  if (turn) renderText($("transcript"), turn.text, turn.follower);
  // The person's line: what is heard as they speak, else what they said to the turn shown.
  const spokenLine = turn && turn.spoken ? { text: turn.prompt, final: true } : null;
  renderUserLine($("you-said"), speech.line || spokenLine);
  renderHistory();
  chartDirty = true;
}

/** ", working: current_time" while a tool of the turn runs (the agent is acting, not stuck). */
function working(turn) {
  if (turn.ended) return "";
  const running = turn.tools.filter((t) => t.to == null).map((t) => t.name);
  return running.length ? `, working: ${running.join(", ")}` : "";
}

const historyRows = new Map(); // turn -> its row, kept so that focus survives an update

function renderHistory() {
  const body = $("history").tBodies[0];
  for (const turn of turns) {
    let row = historyRows.get(turn);
    if (!row) {
      row = body.insertRow();
      for (let column = 0; column < 10; column++) row.insertCell();
      const show = document.createElement("button");
      show.type = "button";
      show.onclick = () => {
        shown = turn;
        changed();
      };
      row.cells[0].append(show);
      row.cells[9].className = "prompt";
      historyRows.set(turn, row);
    }
    row.dataset.status = turn.status;
    row.dataset.mode = turn.mode;
    if (turn.spoken) row.dataset.spoken = "true";
    row.classList.toggle("shown", turn === shown);
    const show = row.cells[0].firstChild;
    show.textContent = turn.number ?? "…";
    show.setAttribute("aria-label", `show turn ${turn.number ?? ""} (${turn.mode})`);
    show.setAttribute("aria-pressed", String(turn === shown));
    const texts = [
      turn.mode,
      turn.status + (turn.stopped && turn.status === "complete" ? " (stopped)" : ""),
      ms(turn.marks.text),
      ms(turn.marks.heard),
      ms(turn.server.first_audio_ms),
      ms(turn.marks.end),
      `${turn.audioSeconds.toFixed(1)} s`,
      turn.voice || "default",
      turn.prompt.length > 60 ? `${turn.prompt.slice(0, 57)}…` : turn.prompt,
    ];
    texts.forEach((text, index) => {
      if (row.cells[index + 1].textContent !== text) row.cells[index + 1].textContent = text;
    });
    row.cells[2].className = `status-${turn.status.replace(/\W+/g, "-")}`;
    row.cells[9].title = turn.error;
  }
  $("compare").textContent = comparison();
}

/** "bidi: first audio 1072 ms (median of 3) · batch: 5154 ms (median of 2): bidi 4.8× sooner" */
function comparison() {
  const median = (values) => {
    const sorted = [...values].sort((a, b) => a - b);
    const middle = sorted.length >> 1;
    return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
  };
  const heard = (mode) =>
    turns.filter((t) => t.mode === mode && t.status === "complete" && t.marks.heard != null);
  const parts = [];
  const figures = {};
  for (const mode of ["bidi", "batch"]) {
    const done = heard(mode).map((t) => t.marks.heard);
    if (!done.length) continue;
    figures[mode] = median(done);
    const figure = Math.round(figures[mode]);
    parts.push(`${mode}: first audio heard ${figure} ms (median of ${done.length})`);
  }
  if (figures.bidi && figures.batch) {
    parts.push(`bidi ${(figures.batch / figures.bidi).toFixed(1)}× sooner`);
  }
  return parts.join(" · ");
}

function drawChart() {
  if (!shown) return;
  const drawn = [shown];
  // The last turn of the other mode, on the same axis: the picture of why bidi is sooner.
  const other = { bidi: "batch", batch: "bidi" }[shown.mode];
  const peer = turns.findLast((t) => t.mode === other && t.marks.heard != null);
  if (peer) drawn.push(peer);
  const chart = drawn.map((turn) => ({
    title:
      `turn ${turn.number ?? "…"} · ${turn.mode} · first audio ${ms(turn.marks.heard)}` +
      (turn.marks.end != null ? ` · turn end ${ms(turn.marks.end)}` : ""),
    deltas: turn.deltas,
    sentences: turn.sentences,
    frames: turn.frames,
    playback: turn.playback,
    tools: turn.tools,
    heard: turn.marks.heard,
    end: turn.marks.end,
  }));
  const svg = $("timeline");
  drawTimeline(svg, chart);
  svg.setAttribute("aria-label", `timeline: ${chart.map((turn) => turn.title).join("; ")}`);
}

// One loop renders what changed and moves the highlight with the audio clock.
function tick(now) {
  if (dirty) {
    dirty = false;
    render();
  }
  if (chartDirty && now - drawnAt >= TIMELINE_EVERY_MS) {
    chartDirty = false;
    drawnAt = now;
    drawChart();
  }
  // The word being heard, where the server times words; else the sentence (an older server,
  // or "word_timings": false).
  const transcript = $("transcript");
  if (shown && shown.follower.hasWords) followWords(transcript, shown.follower, position(shown));
  else if (shown && shown === current) highlight(transcript, shown.text, player.heardTime);
  if (player.playing > 0 !== wasPlaying) {
    wasPlaying = player.playing > 0; // the last audio ended (or began): Stop's state follows
    changed();
  }
  requestAnimationFrame(tick);
}

// --- wiring --------------------------------------------------------------------------------

/** Connect (again) with what the form says: Connect pressed, or the host needs no ticket. */
function connectNow() {
  speech.unavailable = ""; // another API (or the same one, changed) may take speech
  if (deliversText(settings().url)) $("base64").checked = true; // learned here before
  saveSettings();
  link.connect();
}

loadSettings();
$("connection-form").addEventListener("submit", (event) => {
  event.preventDefault();
  connectNow();
});
$("disconnect").addEventListener("click", () => {
  link.close();
  showState({ state: "closed", text: "closed by you" });
});
$("ask-form").addEventListener("submit", (event) => {
  event.preventDefault();
  start("ask");
});
$("speak").addEventListener("click", () => start("speak"));
$("cancel").addEventListener("click", stop);
$("speed").addEventListener("input", () => {
  $("speed-value").textContent = `${Number($("speed").value).toFixed(2)}×`;
});
$("prompt").addEventListener("keydown", (event) => {
  const plain = !event.shiftKey && !event.ctrlKey && !event.altKey && !event.metaKey;
  if (event.key === "Enter" && plain && !event.isComposing) {
    event.preventDefault();
    start("ask");
  }
});
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && !$("cancel").disabled) {
    event.preventDefault();
    stop();
  }
});
listening.wire();
window.addEventListener("resize", changed);
changed();
requestAnimationFrame(tick);
