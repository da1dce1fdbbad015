// Draws the ratios as a horizontal bar chart in SVG, by hand: one group of bars per ratio, one bar
// per database, on a logarithmic axis (ratios are read as "how many times"), with each ratio's
// target as a dashed line.

/** One ratio, measured on each database. */
export interface ChartRow {
  label: string;
  /** The target, drawn as a dashed line: `max` for "at most", `min` for "at least". */
  target?: { value: number; kind: 'max' | 'min' };
  /** By series name; a missing series draws no bar. */
  values: Record<string, number | undefined>;
}

/** What the chart says about itself. */
export interface ChartOptions {
  title: string;
  subtitle: string;
  /** The series (databases), in the order their bars are drawn. */
  series: string[];
}

const COLORS = ['#4e79a7', '#f28e2b', '#59a14f', '#b07aa1'];
const WIDTH = 920;
const LABEL_WIDTH = 360;
const PLOT_RIGHT = WIDTH - 70;
const BAR = 11;
const GAP = 3;
const ROW_PADDING = 16;

/** The SVG text of the chart. */
export function ratiosChart(rows: ChartRow[], { title, subtitle, series }: ChartOptions): string {
  const all = rows.flatMap((row) => [
    ...Object.values(row.values).filter((v): v is number => v !== undefined && v > 0),
    ...(row.target ? [row.target.value] : []),
  ]);
  const ticks = ticksFor(Math.min(0.1, ...all), Math.max(2, ...all));
  const [low, high] = [Math.log10(ticks[0]!), Math.log10(ticks.at(-1)!)];
  const x = (value: number) =>
    LABEL_WIDTH +
    ((Math.log10(Math.max(value, ticks[0]!)) - low) / (high - low)) * (PLOT_RIGHT - LABEL_WIDTH);

  const top = 76;
  const rowHeight = series.length * (BAR + GAP) + ROW_PADDING;
  const plotBottom = top + rows.length * rowHeight;
  const height = plotBottom + 56;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="-apple-system, BlinkMacSystemFont, 'Segoe UI', Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="${WIDTH}" height="${height}" fill="#ffffff"/>`,
    `<text x="16" y="24" font-size="16" font-weight="600">${escapeXml(title)}</text>`,
    `<text x="16" y="44" fill="#555555">${escapeXml(subtitle)}</text>`,
  );
  rows.forEach((_, index) => {
    if (index % 2 === 1) {
      out.push(
        `<rect x="0" y="${top + index * rowHeight - 14}" width="${WIDTH}" height="${rowHeight}" fill="#f3f5f7"/>`,
      );
    }
  });
  for (const tick of ticks) {
    const tx = x(tick).toFixed(1);
    out.push(
      `<line x1="${tx}" y1="${top - 14}" x2="${tx}" y2="${plotBottom}" stroke="${tick === 1 ? '#999999' : '#e4e4e4'}"/>`,
      `<text x="${tx}" y="${plotBottom + 16}" text-anchor="middle" fill="#555555">${tick}×</text>`,
    );
  }
  rows.forEach((row, index) => {
    const y = top + index * rowHeight;
    const middle = y + (series.length * (BAR + GAP)) / 2;
    out.push(`<text x="16" y="${middle + 4}">${escapeXml(row.label)}</text>`);
    series.forEach((name, s) => {
      const value = row.values[name];
      if (value === undefined) return;
      const by = y + s * (BAR + GAP);
      const end = x(value);
      out.push(
        `<rect x="${LABEL_WIDTH}" y="${by}" width="${Math.max(1, end - LABEL_WIDTH).toFixed(1)}" height="${BAR}" fill="${COLORS[s % COLORS.length]}"/>`,
        `<text x="${(end + 4).toFixed(1)}" y="${by + BAR - 1}" font-size="10" fill="#333333">${format(value)}</text>`,
      );
    });
    if (row.target) {
      const tx = x(row.target.value).toFixed(1);
      const sign = row.target.kind === 'max' ? '≤' : '≥';
      out.push(
        `<line x1="${tx}" y1="${y - 3}" x2="${tx}" y2="${y + rowHeight - ROW_PADDING + 1}" stroke="#d62728" stroke-width="1.5" stroke-dasharray="4 3"/>`,
        `<text x="${tx}" y="${y - 5}" font-size="9" fill="#d62728" text-anchor="middle">target ${sign} ${row.target.value}</text>`,
      );
    }
  });
  const legendY = plotBottom + 38;
  series.forEach((name, s) => {
    const lx = LABEL_WIDTH + s * 130;
    out.push(
      `<rect x="${lx}" y="${legendY - 10}" width="12" height="12" fill="${COLORS[s % COLORS.length]}"/>`,
      `<text x="${lx + 18}" y="${legendY}">${escapeXml(name)}</text>`,
    );
  });
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

/** 1-2-5 ticks covering [low, high]. */
function ticksFor(low: number, high: number): number[] {
  const ticks: number[] = [];
  for (let exponent = Math.floor(Math.log10(low)); ; exponent++) {
    for (const step of [1, 2, 5]) {
      const tick = Number((step * 10 ** exponent).toPrecision(1));
      if (tick * 2.5 < low) continue;
      ticks.push(tick);
      if (tick >= high) return ticks;
    }
  }
}

function format(value: number): string {
  return value >= 10 ? value.toFixed(0) : value >= 1 ? value.toFixed(1) : value.toFixed(2);
}

function escapeXml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}
