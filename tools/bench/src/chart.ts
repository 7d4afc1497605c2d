/**
 * A grouped bar chart as a standalone SVG (no library, no fonts to fetch): one group per
 * (file, phase), one bar per engine, value labels on the bars, a legend. People compare bars
 * faster than tables.
 */
export interface ChartGroup {
  group: string;
  values: { label: string; value: number }[];
}

const COLORS = ["#2563eb", "#f59e0b", "#6b7280", "#10b981", "#ef4444"];

function escapeXml(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

export function drawChart(groups: readonly ChartGroup[], title: string): string {
  const labels = [...new Set(groups.flatMap((g) => g.values.map((v) => v.label)))];
  const bar = 34;
  const gap = 26;
  const groupWidth = labels.length * bar + gap;
  const left = 56;
  const top = 56;
  const plotHeight = 260;
  const width = left + groups.length * groupWidth + 20;
  const height = top + plotHeight + 70;
  const max = Math.max(1, ...groups.flatMap((g) => g.values.map((v) => v.value)));
  const step = 10 ** Math.floor(Math.log10(max));
  const ceiling = Math.ceil(max / step) * step;
  const y = (v: number) => top + plotHeight - (v / ceiling) * plotHeight;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
  );
  out.push(`<rect width="${width}" height="${height}" fill="#ffffff"/>`);
  out.push(`<text x="${left}" y="22" font-size="14" font-weight="bold">${escapeXml(title)}</text>`);
  labels.forEach((label, i) => {
    const x = left + i * 150;
    out.push(`<rect x="${x}" y="32" width="12" height="12" fill="${COLORS[i % COLORS.length]}"/>`);
    out.push(`<text x="${x + 16}" y="42">${escapeXml(label)}</text>`);
  });
  for (let t = 0; t <= ceiling + 1e-9; t += ceiling / 5) {
    out.push(`<line x1="${left}" x2="${width - 10}" y1="${y(t).toFixed(1)}" y2="${y(t).toFixed(1)}" stroke="#e5e7eb"/>`);
    out.push(`<text x="${left - 6}" y="${(y(t) + 4).toFixed(1)}" text-anchor="end" fill="#374151">${Number(t.toPrecision(3))}</text>`);
  }
  groups.forEach((g, gi) => {
    const x0 = left + gi * groupWidth + gap / 2;
    g.values.forEach((v) => {
      const i = labels.indexOf(v.label);
      const x = x0 + i * bar;
      const top = y(v.value);
      out.push(
        `<rect x="${x}" y="${top.toFixed(1)}" width="${bar - 4}" height="${(y(0) - top).toFixed(1)}" fill="${COLORS[i % COLORS.length]}"/>`,
      );
      out.push(
        `<text x="${x + (bar - 4) / 2}" y="${(top - 4).toFixed(1)}" text-anchor="middle" font-size="10" fill="#111827">${v.value >= 100 ? v.value.toFixed(0) : v.value.toFixed(1)}</text>`,
      );
    });
    out.push(
      `<text x="${x0 + (labels.length * bar) / 2}" y="${top + plotHeight + 18}" text-anchor="middle" fill="#111827">${escapeXml(g.group)}</text>`,
    );
  });
  out.push(`<line x1="${left}" x2="${left}" y1="${top}" y2="${top + plotHeight}" stroke="#9ca3af"/>`);
  out.push("</svg>");
  return `${out.join("\n")}\n`;
}
