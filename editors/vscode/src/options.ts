// Settings to `initializationOptions` for `ctxfs lsp`, and their checks. Pure: the caller reads
// VS Code's configuration and passes plain values, so the unit tests run this under Node.
// It does not decide the boundary: ctxfs takes that from the workspace folders itself.

export const MODES = ['read-only', 'ask', 'accept-edits', 'trust'] as const;
export type Mode = (typeof MODES)[number];

/** What the user set (undefined: not set). `embedder` must come from user settings only. */
export interface Settings {
  mode?: string;
  embedder?: string;
  embedderModel?: string;
  host?: string;
  approvalTimeout?: number;
  data?: string;
  config?: string;
}

export interface Mapped {
  options: Record<string, string | number>;
  /** Settings that were left out, each with a sentence saying why. */
  problems: string[];
}

const EMBEDDERS = ['static', 'minilm', 'none'];

/** The `initializationOptions` the settings give; bad values are left out and reported. */
export function initializationOptions(s: Settings): Mapped {
  const options: Record<string, string | number> = {};
  const problems: string[] = [];
  const text = (v: string | undefined) => (typeof v === 'string' && v.trim() !== '' ? v.trim() : undefined);
  const mode = text(s.mode);
  if (mode !== undefined) {
    if ((MODES as readonly string[]).includes(mode)) options.mode = mode;
    else problems.push(`ctxfs.mode "${mode}" is none of ${MODES.join(', ')}; ctxfs starts in its default mode (ask).`);
  }
  const embedder = text(s.embedder);
  if (embedder !== undefined) {
    if (EMBEDDERS.includes(embedder) || /^https?:\/\/[^\s/]+(\/\S*)?$/.test(embedder)) options.embedder = embedder;
    else problems.push(`ctxfs.embedder "${embedder}" is none of static, minilm, none or an http(s):// URL; ctxfs uses its default.`);
  }
  const model = text(s.embedderModel);
  if (model !== undefined) options.embedderModel = model;
  const host = text(s.host);
  if (host !== undefined) {
    if (host === 'resend' || host === 'fresh') options.host = host;
    else problems.push(`ctxfs.host "${host}" is neither resend nor fresh; ctxfs uses resend.`);
  }
  if (s.approvalTimeout !== undefined && s.approvalTimeout !== null) {
    if (Number.isFinite(s.approvalTimeout) && s.approvalTimeout > 0) options.approvalTimeout = Math.ceil(s.approvalTimeout);
    else problems.push(`ctxfs.approvalTimeout must be a number of seconds above 0 (it is ${s.approvalTimeout}); ctxfs uses 120.`);
  }
  const data = text(s.data);
  if (data !== undefined) options.data = data;
  const config = text(s.config);
  if (config !== undefined) options.config = config;
  return { options, problems };
}

/** The protocol version this extension needs (`experimental.ctxfs.protocol`). */
export const PROTOCOL = 2;

/** Why a server's `initialize` answer is not usable, or undefined when it is. */
export function protocolProblem(experimental: unknown, binary: string): string | undefined {
  const ctxfs = (experimental as { ctxfs?: { protocol?: unknown; version?: unknown } } | undefined)?.ctxfs;
  if (!ctxfs || typeof ctxfs !== 'object') {
    return `${binary} did not answer as ctxfs (no experimental.ctxfs in its capabilities). Check that ctxfs.path points to the ctxfs binary.`;
  }
  const protocol = typeof ctxfs.protocol === 'number' ? ctxfs.protocol : 0;
  if (protocol < PROTOCOL) {
    const version = typeof ctxfs.version === 'string' ? `ctxfs ${ctxfs.version}` : 'an older ctxfs';
    return `${binary} is ${version} speaking protocol ${protocol}; this extension needs protocol ${PROTOCOL} or newer. Install a newer ctxfs, or point ctxfs.path at one.`;
  }
  return undefined;
}
