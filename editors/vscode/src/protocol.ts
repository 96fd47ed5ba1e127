// The shapes of ctxfs's LSP methods this extension uses (docs/protocol.md in the repository,
// protocol 2). Types only: no behaviour, no VS Code.

export interface CallAnswer {
  id: string;
  text: string;
  isError: boolean;
  facts?: { path?: string; diff?: string; created?: boolean; deleted?: boolean; files?: unknown[] };
}

export interface ChainFile {
  path: string;
  text: string;
  origin: 'global' | 'chain' | 'configured' | 'nearby' | string;
  order: number;
}

export interface OpenSessionAnswer {
  session: string;
  resumed: boolean;
  instructions: string;
  chain: { files: ChainFile[]; notes: string[] };
}

export interface ResultEntry {
  id: string;
  tool: string;
  path?: string;
  lines?: number;
  size: number;
  stub: boolean;
  capped: boolean;
  isError: boolean;
  title: string;
}

export interface ChangeEntry {
  id: string;
  tool: string;
  path: string;
  kind: 'created' | 'modified' | 'deleted' | 'moved' | string;
  from?: string;
  diff: string;
}

export interface ChangeText {
  path: string;
  before: string | null;
  after: string | null;
}

export interface ApprovalOption {
  approval: 'allow_once' | 'allow_session' | 'always_file' | 'always_directory' | 'deny' | string;
  label: string;
  targets?: string[];
}

export interface ApprovalRequest {
  session: string;
  tool: string;
  mode: string;
  paths: string[];
  description: string;
  summary: string;
  options: ApprovalOption[];
  notes: string[];
  message: string;
  timeoutMs: number;
  files?: { path: string; before?: string | null; after?: string | null }[];
}

export interface Grant {
  target: string;
  scope: 'session' | 'always' | string;
}

export interface SetModeAnswer {
  mode: string;
  previous: string;
  instruction: string | null;
}
