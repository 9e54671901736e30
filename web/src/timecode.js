// HH:MM:SS:FF of a frame at the rate the server named (nominal frames a second, drop-frame count:
// SMPTE 12M drop-frame at 29.97 / 59.94, written with ';'), as the desktop window shows it.
export function timecode(frame, tc = { nominal: 25, drop: 0 }) {
  let f = Math.max(0, Math.floor(frame));
  const base = tc.nominal;
  const drop = tc.drop;
  if (drop) {
    const per10 = base * 600 - drop * 9;
    const perMin = base * 60 - drop;
    const tens = Math.floor(f / per10);
    const rest = f % per10;
    f += drop * 9 * tens + (rest > drop ? drop * Math.floor((rest - drop) / perMin) : 0);
  }
  const ff = f % base;
  const s = Math.floor(f / base);
  const two = (n) => String(n).padStart(2, '0');
  return `${two(Math.floor(s / 3600))}:${two(Math.floor(s / 60) % 60)}:${two(s % 60)}${drop ? ';' : ':'}${two(ff)}`;
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return '–';
  const s = Math.max(0, Math.round(seconds));
  return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, '0')} s`;
}
