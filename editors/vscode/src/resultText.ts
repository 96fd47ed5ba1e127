// How a stored result's text is fetched for the user to look at: `ctxfs/resultText`, which
// records nothing in the session, and, only from a ctxfs too old to know that method (it answers
// MethodNotFound), `ctxfs/recall`, which records a result of its own. No VS Code here, so the
// unit tests drive it with a stand-in request function; it does not render anything.
import type { ResultTextAnswer } from './protocol';

/** JSON-RPC's "Method not found". */
export const METHOD_NOT_FOUND = -32601;

export type Request = <T>(method: string, params: unknown) => Promise<T>;

export interface StoredText {
  /** The stored text: without a bracket from ctxfs/resultText, after recall's own bracket otherwise. */
  text: string;
  /** Whether the text came from ctxfs/recall (an older ctxfs), which added a result to the session. */
  recalled: boolean;
}

function isMethodNotFound(e: unknown): boolean {
  return typeof e === 'object' && e !== null && (e as { code?: unknown }).code === METHOD_NOT_FOUND;
}

/** The full text of result `id` of `session`, for a read-only document. Other errors are thrown. */
export async function storedResultText(request: Request, session: string, id: string): Promise<StoredText> {
  try {
    const answer = await request<ResultTextAnswer>('ctxfs/resultText', { session, id });
    return { text: answer.text, recalled: false };
  } catch (e) {
    if (!isMethodNotFound(e)) throw e;
  }
  const answer = await request<{ text: string }>('ctxfs/recall', { session, id });
  return { text: answer.text, recalled: true };
}
