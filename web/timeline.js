// Where a turn's time goes, drawn as SVG: one row of lanes per turn on a shared axis of
// milliseconds from the click, so a bidi turn drawn over a batch one shows why bidi is sooner
// (its audio starts while the text is still being written; batch's waits for the whole text).

const SVG = "http://www.w3.org/2000/svg";
const LABEL_WIDTH = 96; // the lane names' column
const LANE_HEIGHT = 16;
const LANE_GAP = 3;
const TITLE_HEIGHT = 20;
const TURN_GAP = 12;
const AXIS_HEIGHT = 22;

// Lane name, what it shows, and the CSS class that colours it (style.css, with a legend).
export const LANES = [
  ["text", "text_delta frames received", "lane-text"],
  ["sentences", "sentence frames received (chunks cut for speech)", "lane-sentence"],
  ["tools", "tool calls, from tool_start to tool_end (the agent working)", "lane-tool"],
  ["audio in", "audio frames received", "lane-frame"],
  ["playback", "audio as heard (gaps are stalls)", "lane-play"],
];

function node(name, attributes = {}, text = "") {
  const element = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, value);
  if (text) element.textContent = text;
  return element;
}

/** A tick step (ms) that puts about 6-10 labels on the axis. */
function tickStep(span) {
  for (const step of [100, 200, 250, 500, 1000, 2000, 5000, 10000, 20000, 30000, 60000]) {
    if (span / step <= 10) return step;
  }
  return 120000;
}

/** Draw `turns` into `svg`. Each turn: {title, deltas, sentences, frames: [ms],
 * playback: [[fromMs, toMs]], tools: [{name, from, to}], heard, end}, all ms from its click. */
export function drawTimeline(svg, turns) {
  const width = Math.max(320, Math.round(svg.clientWidth || svg.parentElement?.clientWidth || 640));
  const blockHeight = TITLE_HEIGHT + LANES.length * (LANE_HEIGHT + LANE_GAP);
  const height = turns.length * (blockHeight + TURN_GAP) + AXIS_HEIGHT;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("height", String(height));
  svg.replaceChildren();
  if (turns.length === 0) return;

  const latest = Math.max(
    1000,
    ...turns.flatMap((turn) => [
      turn.end ?? 0,
      ...turn.playback.map(([, to]) => to),
      ...turn.frames,
      ...turn.deltas,
      ...(turn.tools ?? []).map((call) => call.to ?? call.from),
    ]),
  );
  const step = tickStep(latest);
  const span = Math.ceil(latest / step) * step;
  const plotWidth = width - LABEL_WIDTH - 8;
  const x = (ms) => LABEL_WIDTH + (Math.max(0, ms) / span) * plotWidth;

  // The grid and axis first, under everything.
  const axisY = height - AXIS_HEIGHT;
  for (let ms = 0; ms <= span; ms += step) {
    svg.append(node("line", { x1: x(ms), x2: x(ms), y1: 0, y2: axisY, class: "grid" }));
    const label = step < 1000 ? `${(ms / 1000).toFixed(ms % 1000 ? 2 : 0)} s` : `${ms / 1000} s`;
    const at = { x: x(ms), y: axisY + 15, class: "axis", "text-anchor": "middle" };
    svg.append(node("text", at, label));
  }

  turns.forEach((turn, block) => {
    const top = block * (blockHeight + TURN_GAP);
    svg.append(node("text", { x: 0, y: top + 14, class: "turn-title" }, turn.title));
    const laneY = (lane) => top + TITLE_HEIGHT + lane * (LANE_HEIGHT + LANE_GAP);
    LANES.forEach(([name, , cls], lane) => {
      svg.append(node("text", { x: 0, y: laneY(lane) + 12, class: "lane-name" }, name));
      svg.append(
        node("rect", {
          x: LABEL_WIDTH,
          y: laneY(lane),
          width: plotWidth,
          height: LANE_HEIGHT,
          class: `lane-bg ${cls}`,
        }),
      );
    });
    const ticks = (times, lane, cls) => {
      for (const ms of times) {
        svg.append(
          node("rect", {
            x: x(ms) - 1,
            y: laneY(lane) + 2,
            width: 2,
            height: LANE_HEIGHT - 4,
            class: cls,
          }),
        );
      }
    };
    ticks(turn.deltas, 0, "mark lane-text");
    ticks(turn.sentences, 1, "mark lane-sentence");
    for (const call of turn.tools ?? []) {
      const to = call.to ?? turn.end ?? latest; // still running: up to now
      svg.append(
        node("rect", {
          x: x(call.from), y: laneY(2) + 2, width: Math.max(2, x(to) - x(call.from)),
          height: LANE_HEIGHT - 4, class: "mark lane-tool",
        }),
      );
      const label = `${call.to == null ? "working: " : ""}${call.name}`;
      svg.append(node("text", { x: x(call.from) + 3, y: laneY(2) + 12, class: "tool-name" }, label));
    }
    ticks(turn.frames, 3, "mark lane-frame");
    for (const [from, to] of turn.playback) {
      svg.append(
        node("rect", {
          x: x(from), y: laneY(4) + 2, width: Math.max(1, x(to) - x(from)), height: LANE_HEIGHT - 4,
          class: "mark lane-play",
        }),
      );
    }
    const bottom = laneY(LANES.length) - LANE_GAP;
    if (turn.heard != null) {
      const at = x(turn.heard);
      svg.append(node("line", { x1: at, x2: at, y1: laneY(0), y2: bottom, class: "heard-line" }));
    }
    if (turn.end != null) {
      const at = x(turn.end);
      svg.append(node("line", { x1: at, x2: at, y1: laneY(0), y2: bottom, class: "end-line" }));
    }
  });
}
