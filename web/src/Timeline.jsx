// The voice-over on the render's frame grid: the waveform, the per-frame RMS (dB scale) with the
// silence threshold (drag it), the silent spans the server computed, the playhead, in and out.
import { useEffect, useRef, useState } from 'preact/hooks';
import { timecode } from './timecode.js';

const FLOOR_DB = -60;
const dB = (v) => Math.max(FLOOR_DB, 20 * Math.log10(Math.max(v, 1e-6)));
const fromDb = (d) => 10 ** (d / 20);

function draw(canvas, wave, frame, range, threshold) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth;
  const h = canvas.clientHeight;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
  }
  const g = canvas.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  g.fillStyle = '#11161d';
  g.fillRect(0, 0, w, h);
  if (!wave?.frames) return;
  const n = wave.frames;
  const x = (f) => (f / n) * w;
  // silent spans: the avatar itself shows there
  g.fillStyle = 'rgba(96, 125, 160, 0.28)';
  for (const [a, b] of wave.silent_spans) g.fillRect(x(a), 0, Math.max(1, x(b) - x(a)), h);
  // the envelope (linear amplitude)
  const env = wave.envelope;
  const mid = h / 2;
  g.fillStyle = '#3d5a80';
  const cols = env.max.length;
  for (let i = 0; i < cols; i += 1) {
    const cx = (i / cols) * w;
    const top = mid - env.max[i] * mid * 0.95;
    const bot = mid - env.min[i] * mid * 0.95;
    g.fillRect(cx, top, Math.max(1, w / cols), Math.max(1, bot - top));
  }
  // RMS per frame on a dB scale (bottom = FLOOR_DB, top = 0 dBFS)
  const y = (v) => h - ((dB(v) - FLOOR_DB) / -FLOOR_DB) * h;
  g.strokeStyle = '#f4a261';
  g.lineWidth = 1.25;
  g.beginPath();
  wave.rms.forEach((v, f) => {
    if (f) g.lineTo(x(f + 0.5), y(v));
    else g.moveTo(x(0.5), y(v));
  });
  g.stroke();
  // outside in/out: dimmed
  g.fillStyle = 'rgba(0, 0, 0, 0.55)';
  if (range.in !== null) g.fillRect(0, 0, x(range.in), h);
  if (range.out !== null) g.fillRect(x(range.out + 1), 0, w - x(range.out + 1), h);
  // the threshold
  const ty = y(threshold);
  g.strokeStyle = '#e9c46a';
  g.setLineDash([5, 4]);
  g.beginPath();
  g.moveTo(0, ty);
  g.lineTo(w, ty);
  g.stroke();
  g.setLineDash([]);
  g.fillStyle = '#e9c46a';
  g.fillRect(w - 12, ty - 5, 12, 10);
  // the playhead
  g.fillStyle = '#ffffff';
  g.fillRect(Math.min(w - 2, x(frame)), 0, 2, h);
}

export function Timeline({ wave, frame, range, onFrame, onRange, threshold, onThreshold, thresholdSpec, readOnly }) {
  const canvas = useRef(null);
  const drag = useRef(null);
  const [, redraw] = useState(0);
  const n = wave ? wave.frames : 0;
  const tc = wave ? wave.timecode : undefined;

  useEffect(() => {
    if (canvas.current) draw(canvas.current, wave, frame, range, threshold);
  });
  useEffect(() => {
    const ro = new ResizeObserver(() => redraw((v) => v + 1));
    if (canvas.current) ro.observe(canvas.current);
    return () => ro.disconnect();
  }, []);

  const clampFrame = (f) => Math.max(0, Math.min(n - 1, Math.round(f)));
  const frameAt = (e) => {
    const r = canvas.current.getBoundingClientRect();
    return clampFrame(Math.floor(((e.clientX - r.left) / r.width) * n));
  };
  const levelAt = (e) => {
    const r = canvas.current.getBoundingClientRect();
    const d = FLOOR_DB * ((e.clientY - r.top) / r.height);
    const max = thresholdSpec?.maximum ?? 1;
    const min = thresholdSpec?.minimum ?? 0;
    return Math.min(max, Math.max(min, Number(fromDb(Math.min(0, d)).toPrecision(3))));
  };
  const nearThreshold = (e) => {
    const r = canvas.current.getBoundingClientRect();
    const ty = r.height - ((dB(threshold) - FLOOR_DB) / -FLOOR_DB) * r.height;
    return Math.abs(e.clientY - r.top - ty) <= 6;
  };

  function down(e) {
    if (!n) return;
    canvas.current.setPointerCapture(e.pointerId);
    canvas.current.focus();
    if (!readOnly && nearThreshold(e)) {
      drag.current = 'threshold';
    } else {
      drag.current = 'scrub';
      onFrame(frameAt(e));
    }
  }
  function move(e) {
    if (drag.current === 'scrub') onFrame(frameAt(e));
    else if (drag.current === 'threshold') onThreshold(levelAt(e));
    else if (n) canvas.current.style.cursor = !readOnly && nearThreshold(e) ? 'ns-resize' : 'pointer';
  }
  function up() {
    drag.current = null;
  }
  function key(e) {
    if (!n) return;
    const second = tc ? tc.nominal : 25;
    const steps = { ArrowLeft: -1, ArrowRight: 1, PageUp: -second, PageDown: second };
    if (e.key in steps) onFrame(clampFrame(frame + steps[e.key] * (e.shiftKey ? second : 1)));
    else if (e.key === 'Home') onFrame(0);
    else if (e.key === 'End') onFrame(n - 1);
    else if (e.key === 'i' || e.key === 'I') setIn();
    else if (e.key === 'o' || e.key === 'O') setOut();
    else return;
    e.preventDefault();
  }
  function setIn() {
    onRange({ in: frame, out: range.out !== null && range.out < frame ? null : range.out });
  }
  function setOut() {
    onRange({ in: range.in !== null && range.in > frame ? null : range.in, out: frame });
  }

  const label = wave ? `${timecode(frame, tc)} · frame ${frame} of ${n} · ${wave.fps} fps` : '';
  return (
    <div class="timeline">
      <canvas
        ref={canvas}
        class="wave"
        tabIndex={0}
        role="slider"
        aria-label="Timeline: click or use the arrow keys to show a frame; I and O set in and out"
        aria-valuemin={0}
        aria-valuemax={Math.max(0, n - 1)}
        aria-valuenow={frame}
        aria-valuetext={wave ? timecode(frame, tc) : 'no voice-over'}
        aria-disabled={!wave}
        data-testid="waveform"
        onPointerDown={down}
        onPointerMove={move}
        onPointerUp={up}
        onPointerCancel={up}
        onKeyDown={key}
      />
      <div class="timebar">
        <span class="tc" data-testid="timecode">
          {wave ? label : 'Choose a voice-over to see its waveform.'}
        </span>
        {wave && (
          <span class="muted small" data-testid="silence">
            {wave.silent_spans.length} silences, {wave.silent_spans.reduce((s, [a, b]) => s + b - a, 0)} frames
            {' '}(threshold {threshold}, {dB(threshold).toFixed(1)} dBFS)
          </span>
        )}
      </div>
      {/* biome-ignore lint/a11y/useSemanticElements: a fieldset would add a border and a legend to a row of buttons */}
      <div class="inout" role="group" aria-label="In and out points">
        <span class="pair">
          <button type="button" disabled={!wave} onClick={setIn} aria-keyshortcuts="I">
            Set in
          </button>
          <span class="tc" data-testid="in">
            In {range.in === null ? '—' : timecode(range.in, tc)}
          </span>
        </span>
        <span class="pair">
          <button type="button" disabled={!wave} onClick={setOut} aria-keyshortcuts="O">
            Set out
          </button>
          <span class="tc" data-testid="out">
            Out {range.out === null ? '—' : timecode(range.out, tc)}
          </span>
        </span>
        <button type="button" disabled={range.in === null && range.out === null} onClick={() => onRange({ in: null, out: null })}>
          Clear in/out
        </button>
      </div>
    </div>
  );
}
