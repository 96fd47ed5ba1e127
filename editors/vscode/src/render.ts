// How ctxfs's answers are shown: labels for the Results, Changes and Instructions views and the
// text of a stored result's document. Pure (no VS Code), so the unit tests cover it under Node.
// It does not fetch anything; the views call ctxfs and hand the answers here.
import type { ChainFile, ChangeEntry, ResultEntry } from './protocol';

/** A byte count for people: `812 B`, `3.2 KB`, `1.4 MB`. */
export function formatSize(bytes: number): string {
  if (!Number.isFinite(bytes) || bytes < 0) return '?';
  if (bytes < 1024) return `${bytes} B`;
  const units = ['KB', 'MB', 'GB'];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value < 10 ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
}

/** A path shown relative to the first workspace folder that holds it, else as is. */
export function shortPath(path: string, roots: string[]): string {
  for (const given of roots) {
    const root = given.length > 1 ? given.replace(/\/+$/, '') : given;
    const base = root.endsWith('/') ? root : root + '/';
    if (path === root) return '.';
    if (path.startsWith(base)) return path.slice(base.length);
  }
  return path;
}

export interface Label {
  label: string;
  description: string;
  tooltip: string;
}

/** One row of the Results view: `#000c  read · src/a.rs · 12 lines · 1.2 KB · stub`. */
export function resultLabel(e: ResultEntry, roots: string[]): Label {
  const parts = [e.tool];
  if (e.path) parts.push(shortPath(e.path, roots));
  if (typeof e.lines === 'number') parts.push(`${e.lines} ${e.lines === 1 ? 'line' : 'lines'}`);
  parts.push(formatSize(e.size));
  if (e.stub) parts.push('stub');
  if (e.capped) parts.push('capped');
  if (e.isError) parts.push('error');
  return { label: e.id, description: parts.join(' · '), tooltip: e.title };
}

const KIND_WORD: Record<string, string> = { created: 'created', modified: 'modified', deleted: 'deleted', moved: 'moved' };

/** One row of the Changes view: `#000d  edit · notes/todo.md (modified)`. */
export function changeLabel(c: ChangeEntry, roots: string[]): Label {
  const path = shortPath(c.path, roots);
  const kind = KIND_WORD[c.kind] ?? c.kind;
  const from = c.from ? ` from ${shortPath(c.from, roots)}` : '';
  const stat = diffStat(c.diff);
  return {
    label: c.id,
    description: `${c.tool} · ${path} (${kind}${from})${stat ? ' ' + stat : ''}`,
    tooltip: `${c.id} ${c.tool}: ${path} ${kind}${from}`,
  };
}

/** `+3 −1` from a unified diff (file header lines not counted). */
export function diffStat(diff: string): string {
  let added = 0;
  let removed = 0;
  for (const line of diff.split('\n')) {
    if (line.startsWith('+++') || line.startsWith('---')) continue;
    if (line.startsWith('+')) added++;
    else if (line.startsWith('-')) removed++;
  }
  return added || removed ? `+${added} −${removed}` : '';
}

const ORIGIN_WORD: Record<string, string> = {
  global: 'global (your config)',
  chain: 'chain (root to start)',
  configured: 'configured',
  nearby: 'nearby',
};

/** One row of the Instructions view: `1. AGENTS.md  chain · sub/dir`. */
export function chainLabel(f: ChainFile, index: number, roots: string[]): Label {
  const short = shortPath(f.path, roots);
  const slash = short.lastIndexOf('/');
  const name = slash >= 0 ? short.slice(slash + 1) : short;
  const dir = slash >= 0 ? short.slice(0, slash) : '';
  const origin = ORIGIN_WORD[f.origin] ?? f.origin;
  return {
    label: `${index + 1}. ${name}`,
    description: `${f.origin}${dir ? ' · ' + dir : ''}`,
    tooltip: `${f.path}\norigin: ${origin}, order ${f.order}`,
  };
}

/** The chain in the order ctxfs gives it (by `order`, ties kept as sent). */
export function orderedChain(files: ChainFile[]): ChainFile[] {
  return files.map((f, i) => ({ f, i })).sort((a, b) => a.f.order - b.f.order || a.i - b.i).map((x) => x.f);
}

/** The text of a stored result's read-only document: what the model read, under a header line. */
export function resultDocument(entry: Pick<ResultEntry, 'id' | 'tool' | 'path'> | undefined, id: string, text: string): string {
  const what = entry ? `${entry.tool}${entry.path ? ' ' + entry.path : ''}` : 'result';
  return `ctxfs result ${id} (${what}), as stored; ids like ${id} are links.\n\n${text}${text.endsWith('\n') ? '' : '\n'}`;
}
