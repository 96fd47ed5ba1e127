// Finding the ctxfs binary: the `ctxfs.path` setting, else `ctxfs` on PATH. Node only (no VS
// Code), so the unit tests cover it. It does not run the binary; the server module does that
// and checks the protocol it speaks.
import { accessSync, constants, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, isAbsolute, join } from 'node:path';

export type Found = { path: string; from: 'setting' | 'PATH' } | { problem: string };

function executable(path: string): boolean {
  try {
    if (!statSync(path).isFile()) return false;
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The binary to start, or a sentence saying why there is none and what to do. */
export function findBinary(setting: string | undefined, envPath: string | undefined): Found {
  const wanted = setting?.trim();
  if (wanted) {
    const path = wanted.startsWith('~/') ? join(homedir(), wanted.slice(2)) : wanted;
    if (!isAbsolute(path)) {
      return { problem: `ctxfs.path "${wanted}" is not an absolute path. Set it to the full path of the ctxfs binary.` };
    }
    if (!executable(path)) {
      return { problem: `ctxfs.path is "${wanted}", but no executable file is there. Fix the setting, or clear it to use ctxfs from PATH.` };
    }
    return { path, from: 'setting' };
  }
  for (const dir of (envPath ?? '').split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, 'ctxfs');
    if (executable(candidate)) return { path: candidate, from: 'PATH' };
  }
  return {
    problem:
      'ctxfs was not found: ctxfs.path is not set and no ctxfs is on PATH. Install ctxfs (cargo install --path . in its repository, or a release binary) and set ctxfs.path to it.',
  };
}
