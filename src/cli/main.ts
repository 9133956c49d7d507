/**
 * The headless CLI over src/core (docs/formats.md §1): `npm run -s cli -- <subcommand> ...`.
 * Progress goes to stderr; with --json the last stdout line is one JSON object.
 * Run as a script it exits with runCli's code; imported (tests), it only exports runCli.
 */
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { isUserError } from '../common/errors';
import { asHeapExhaustion } from '../core/model/oom';
import { cmdGenerate, GENERATE_HELP } from './generate';
import { cmdSft, SFT_HELP } from './sft';
import { cmdTrain, TRAIN_HELP } from './train';
import { cmdTrainReward, TRAIN_REWARD_HELP } from './train-reward';
import { cmdBench, BENCH_HELP } from './bench';

type Command = { help: string; run: (argv: string[]) => Promise<void> };

const COMMANDS: Record<string, Command> = {
  generate: { help: GENERATE_HELP, run: cmdGenerate },
  train: { help: TRAIN_HELP, run: cmdTrain },
  sft: { help: SFT_HELP, run: cmdSft },
  'train-reward': { help: TRAIN_REWARD_HELP, run: cmdTrainReward },
  bench: { help: BENCH_HELP, run: cmdBench },
};

function usage(): string {
  return `usage: npm run -s cli -- <subcommand> [options]\n\n${Object.values(COMMANDS)
    .map((c) => c.help)
    .join('\n\n')}\n`;
}

/** Where the CLI writes (the process's streams; tests pass their own). */
export interface CliOutput {
  stdout(text: string): void;
  stderr(text: string): void;
}

const processOutput: CliOutput = {
  stdout: (t) => void process.stdout.write(t),
  stderr: (t) => void process.stderr.write(t),
};

/**
 * One invocation (`args`: what follows the script) and its exit code: 0 done, 1 a UserError or running out of
 * memory (one line on stderr, no stack), 2 a usage error. Anything else is rethrown (a bug: the script prints
 * it as an internal error with exit code 70).
 */
export async function runCli(args: string[], out: CliOutput = processOutput): Promise<number> {
  const [sub, ...rest] = args;
  if (!sub || sub === '--help' || sub === '-h' || sub === 'help') {
    out.stdout(usage());
    return sub ? 0 : 2;
  }
  const cmd = COMMANDS[sub];
  if (!cmd) {
    out.stderr(`error: unknown subcommand "${sub}"; expected one of: ${Object.keys(COMMANDS).join(', ')}\n`);
    return 2;
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    out.stdout(cmd.help + '\n');
    return 0;
  }
  try {
    await cmd.run(rest);
    return 0;
  } catch (e) {
    if (isUserError(e)) {
      out.stderr(`error: ${e.message}\n`);
      return 1;
    }
    // A backend that ran out of memory (a WASM trap, an allocation failure) is said in words, never as a stack.
    const oom = asHeapExhaustion(e, { phase: sub });
    if (oom) {
      out.stderr(`error: ${oom.message}\n`);
      return 1;
    }
    throw e;
  }
}

function isScript(): boolean {
  try {
    return (
      !!process.argv[1] && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url))
    );
  } catch {
    return false;
  }
}

if (isScript()) {
  runCli(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (e) => {
      process.stderr.write(`internal error: ${(e as Error).stack ?? e}\n`);
      process.exit(70);
    },
  );
}
