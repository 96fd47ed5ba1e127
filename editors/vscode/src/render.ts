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

/** One row of the Instructions view: `1. AGENTS.md  chain · sub/dir` (`path`: the file's absolute path). */
export function chainLabel(f: ChainFile, index: number, roots: string[], path = f.path): Label {
  const short = shortPath(path, roots);
  const slash = short.lastIndexOf('/');
  const name = slash >= 0 ? short.slice(slash + 1) : short;
  const dir = slash >= 0 ? short.slice(0, slash) : '';
  const origin = ORIGIN_WORD[f.origin] ?? f.origin;
  return {
    label: `${index + 1}. ${name}`,
    description: `${f.origin}${dir ? ' · ' + dir : ''}`,
    tooltip: `${path}\norigin: ${origin}, order ${f.order}`,
  };
}

/** The chain in the order ctxfs gives it (by `order`, ties kept as sent). */
export function orderedChain(files: ChainFile[]): ChainFile[] {
  return files.map((f, i) => ({ f, i })).sort((a, b) => a.f.order - b.f.order || a.i - b.i).map((x) => x.f);
}

/**
 * The text of a stored result's read-only document: what the model read, under a header line.
 * `text` is ctxfs/recall's answer; its own bracket line (`[#0007 recall #0001 lines 1-4 of 4]`)
 * is folded into the header.
 */
export function resultDocument(entry: Pick<ResultEntry, 'id' | 'tool' | 'path'> | undefined, id: string, text: string): string {
  const what = entry ? `${entry.tool}${entry.path ? ' ' + entry.path : ''}` : 'result';
  const recall = /^\[#[0-9a-f]+ recall #[0-9a-f]+ (lines [^\]]*)\]\n/.exec(text);
  const body = recall ? text.slice(recall[0].length) : text;
  const lines = recall ? `, ${recall[1]}` : '';
  return `ctxfs result ${id} (${what}${lines}), as stored; ids like ${id} are links.\n\n${body}${body.endsWith('\n') ? '' : '\n'}`;
}

/** The longest directory every root is in (`/` at worst). */
export function commonAncestor(roots: string[]): string | undefined {
  if (!roots.length) return undefined;
  const split = roots.map((r) => r.replace(/\/+$/, '').split('/'));
  const first = split[0];
  let n = 0;
  while (n < first.length && split.every((parts) => parts[n] === first[n])) n++;
  const joined = first.slice(0, n).join('/');
  return joined === '' ? '/' : joined;
}

/**
 * The file a chain entry names, as an absolute path. ctxfs (protocol 2) gives chain files
 * relative to the boundary (the one folder, or the folders' common ancestor) and the user's own
 * files as labels such as `~/.config/ctxfs/AGENTS.md (global)`; an absolute path is kept.
 */
export function chainFilePath(path: string, roots: string[], home: string): string | undefined {
  const label = /^(.*) \((global|configured)\)$/.exec(path);
  const bare = label ? label[1] : path;
  if (bare.startsWith('/')) return bare;
  if (bare === '~' || bare.startsWith('~/')) return home.replace(/\/+$/, '') + bare.slice(1);
  const base = roots.length === 1 ? roots[0].replace(/\/+$/, '') : commonAncestor(roots);
  if (!base) return undefined;
  if (bare === '.' || bare === '') return base;
  return `${base === '/' ? '' : base}/${bare}`;
}
