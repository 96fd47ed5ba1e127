// The languageModelTools contribution, made from the repository's generated tool schemas
// (schemas/tools/*.json, written by ctxfs itself). It only builds the JSON; gen-tools.mjs writes
// it into package.json and the unit test checks that package.json holds exactly it.
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

/** Each tool's icon in the chat UI (an editor's choice; an unknown tool gets the generic one). Whether a
 * tool changes anything comes from its schema file's `hints`. */
const ICONS = {
  read: '$(file)', list: '$(list-tree)', stat: '$(info)', glob: '$(file-submodule)', grep: '$(search)',
  search: '$(sparkle)', recall: '$(history)', write: '$(new-file)', edit: '$(edit)', multiedit: '$(edit)',
  apply_patch: '$(diff)', mkdir: '$(new-folder)', mv: '$(arrow-right)', rm: '$(trash)', tag: '$(tag)',
  skills_list: '$(book)', skill_view: '$(book)', skill_manage: '$(book)',
  commit: '$(git-commit)', branch: '$(git-branch)', merge: '$(git-merge)', git_tag: '$(tag)', memory: '$(bookmark)',
  pr: '$(git-pull-request)', release: '$(package)',
};

/** The first sentence of a description, for the UI. */
export function firstSentence(text) {
  const match = /^(.*?[.!?])(\s|$)/s.exec(text);
  return (match ? match[1] : text).replace(/\s+/g, ' ').trim();
}

/** One contribution entry from one schema file's content. */
export function contribution(schema) {
  return {
    name: `ctxfs_${schema.name}`,
    displayName: `ctxfs ${schema.name}`,
    toolReferenceName: `ctxfs_${schema.name}`,
    canBeReferencedInPrompt: true,
    icon: ICONS[schema.name] ?? '$(tools)',
    tags: ['ctxfs', schema.hints.read_only ? 'ctxfs-reads' : 'ctxfs-changes'],
    userDescription: firstSentence(schema.description),
    modelDescription: schema.description,
    inputSchema: schema.input_schema,
  };
}

/** Every tool schema under `dir`, sorted by name, as contribution entries. */
export function contributions(dir) {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((f) => contribution(JSON.parse(readFileSync(join(dir, f), 'utf8'))));
}
