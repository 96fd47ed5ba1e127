// Finding ctxfs result ids (`#000c`, `#1a2b`, `#10000`) in text, for document links and hovers.
// Pure: no VS Code here, so the unit tests run it under plain Node. It does not check that an
// id exists; the link provider filters by the session's known ids when it has them.

/** A result id found in a text: the id with its `#`, and where it starts and ends (UTF-16 offsets). */
export interface IdMatch {
  id: string;
  start: number;
  end: number;
}

/** An id: `#` and at least four lowercase hex digits, not part of a longer word. */
const ID = /(?<![\w&#])#[0-9a-f]{4,}(?![\w-])/g;

/** Every id in `text`, in order. */
export function findIds(text: string): IdMatch[] {
  const found: IdMatch[] = [];
  for (const m of text.matchAll(ID)) {
    const start = m.index ?? 0;
    found.push({ id: m[0], start, end: start + m[0].length });
  }
  return found;
}

/** Whether `text` is exactly one id. */
export function isId(text: string): boolean {
  return /^#[0-9a-f]{4,}$/.test(text);
}

/** The id at a UTF-16 offset of `text`, if one covers it. */
export function idAt(text: string, offset: number): IdMatch | undefined {
  return findIds(text).find((m) => m.start <= offset && offset <= m.end);
}
