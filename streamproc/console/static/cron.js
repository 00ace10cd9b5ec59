// Client-side cron checking and next-fire-time preview for the schedule form.
// The server (cronsim) is authoritative: this covers the standard five fields, names, lists,
// ranges, steps and @macros; other syntax (L, W, #) is reported as "checked on save".

const FIELDS = [
  { name: "minute", min: 0, max: 59 },
  { name: "hour", min: 0, max: 23 },
  { name: "day of month", min: 1, max: 31 },
  { name: "month", min: 1, max: 12, names: ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"] },
  { name: "day of week", min: 0, max: 7, names: ["sun", "mon", "tue", "wed", "thu", "fri", "sat"] },
];

const MACROS = {
  "@yearly": "0 0 1 1 *",
  "@annually": "0 0 1 1 *",
  "@monthly": "0 0 1 * *",
  "@weekly": "0 0 * * 0",
  "@daily": "0 0 * * *",
  "@midnight": "0 0 * * *",
  "@hourly": "0 * * * *",
};

export class CronError extends Error {}
export class CronUnsupported extends Error {}

function value(token, field) {
  const t = token.toLowerCase();
  if (field.names) {
    const i = field.names.indexOf(t);
    if (i >= 0) return i + (field.min === 1 ? 1 : 0);
  }
  if (!/^\d+$/.test(t)) throw new CronError(`${field.name}: "${token}" is not a number`);
  const n = Number(t);
  if (n < field.min || n > field.max) {
    throw new CronError(`${field.name}: ${n} is outside ${field.min}–${field.max}`);
  }
  return n;
}

function parseField(text, field) {
  if (/[LW#]/i.test(text.replace(/[a-z]{3}/gi, (m) => (field.names?.includes(m.toLowerCase()) ? "" : m)))) {
    throw new CronUnsupported(`${field.name}: "${text}" uses extended syntax`);
  }
  const set = new Set();
  const star = text === "*" || text === "?";
  for (const part of text.split(",")) {
    if (part === "") throw new CronError(`${field.name}: empty list item`);
    const [range, stepText, extra] = part.split("/");
    if (extra !== undefined) throw new CronError(`${field.name}: "${part}" has two steps`);
    let step = 1;
    if (stepText !== undefined) {
      if (!/^\d+$/.test(stepText) || Number(stepText) === 0) {
        throw new CronError(`${field.name}: bad step "${stepText}"`);
      }
      step = Number(stepText);
    }
    let lo;
    let hi;
    if (range === "*" || range === "?") {
      lo = field.min;
      hi = field.max === 7 ? 6 : field.max;
    } else if (range.includes("-")) {
      const [a, b, more] = range.split("-");
      if (more !== undefined) throw new CronError(`${field.name}: bad range "${range}"`);
      lo = value(a, field);
      hi = value(b, field);
      if (hi < lo) throw new CronError(`${field.name}: range ${range} is backwards`);
    } else {
      lo = value(range, field);
      hi = stepText !== undefined ? (field.max === 7 ? 6 : field.max) : lo;
    }
    for (let v = lo; v <= hi; v += step) set.add(field.max === 7 && v === 7 ? 0 : v);
  }
  return { set, star };
}

/** Parse a cron expression; throws CronError (invalid) or CronUnsupported (server checks). */
export function parseCron(expr) {
  let text = (expr || "").trim();
  if (!text) throw new CronError("enter a cron expression");
  if (text.startsWith("@")) {
    const macro = MACROS[text.toLowerCase()];
    if (!macro) throw new CronError(`unknown macro ${text}`);
    text = macro;
  }
  const parts = text.split(/\s+/);
  if (parts.length !== 5) {
    throw new CronError(`expected 5 fields (minute hour day month weekday), got ${parts.length}`);
  }
  const [minute, hour, dom, month, dow] = parts.map((p, i) => parseField(p, FIELDS[i]));
  return { minute, hour, dom, month, dow };
}

const formatters = new Map();

/** An Intl formatter giving wall-clock fields in ``timeZone``; throws RangeError if unknown. */
function wallClock(timeZone) {
  let f = formatters.get(timeZone);
  if (!f) {
    f = new Intl.DateTimeFormat("en-US", {
      timeZone,
      hourCycle: "h23",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "numeric",
      minute: "numeric",
      weekday: "short",
    });
    formatters.set(timeZone, f);
  }
  return f;
}

const WEEKDAYS = { Sun: 0, Mon: 1, Tue: 2, Wed: 3, Thu: 4, Fri: 5, Sat: 6 };

function fields(f, ms) {
  const out = {};
  for (const p of f.formatToParts(new Date(ms))) out[p.type] = p.value;
  return {
    year: Number(out.year),
    month: Number(out.month),
    day: Number(out.day),
    hour: Number(out.hour),
    minute: Number(out.minute),
    weekday: WEEKDAYS[out.weekday],
  };
}

export function validTimeZone(timeZone) {
  try {
    wallClock(timeZone);
    return true;
  } catch {
    return false;
  }
}

function dayMatches(c, w) {
  if (!c.month.set.has(w.month)) return false;
  const domOk = c.dom.set.has(w.day);
  const dowOk = c.dow.set.has(w.weekday);
  if (c.dom.star && c.dow.star) return true;
  if (c.dom.star) return dowOk;
  if (c.dow.star) return domOk;
  return domOk || dowOk; // both restricted: either matches (Vixie cron)
}

/** The next ``count`` fire times (Date) after ``from`` in ``timeZone``, searching ``years``. */
export function nextFireTimes(expr, timeZone, count = 3, from = Date.now(), years = 5) {
  const c = parseCron(expr);
  const f = wallClock(timeZone);
  const QUARTER = 15 * 60_000;
  // Every UTC offset is a multiple of 15 minutes, so quarter-hour UTC steps land on local
  // quarter-hours; whole non-matching hours are skipped.
  let t = Math.floor(from / QUARTER) * QUARTER;
  const end = from + years * 366 * 86_400_000;
  const out = [];
  const seen = new Set();
  while (t < end && out.length < count) {
    const w = fields(f, t);
    if (!dayMatches(c, w)) {
      // to about 23:00 local (a DST shift moves it by an hour at most), then hour by hour
      t += (Math.max(1, 23 - w.hour) * 60 - w.minute) * 60_000;
      continue;
    }
    if (!c.hour.set.has(w.hour)) {
      t += (60 - w.minute) * 60_000;
      continue;
    }
    for (let m = w.minute; m < w.minute + 15 && out.length < count; m++) {
      if (!c.minute.set.has(m)) continue;
      const at = t + (m - w.minute) * 60_000;
      const key = `${w.year}-${w.month}-${w.day} ${w.hour}:${m}`;
      if (at > from && !seen.has(key)) {
        seen.add(key);
        out.push(new Date(at));
      }
    }
    t += QUARTER;
  }
  return out;
}
