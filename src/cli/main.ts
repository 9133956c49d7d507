/**
 * The headless CLI over src/core (docs/formats.md §1): `npm run -s cli -- <subcommand> ...`.
 * Progress goes to stderr; with --json the last stdout line is one JSON object.
 */
import { isUserError } from '../core/errors';
import { asHeapExhaustion } from '../core/oom';
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

async function main(): Promise<number> {
  const [sub, ...rest] = process.argv.slice(2);
  if (!sub || sub === '--help' || sub === '-h' || sub === 'help') {
    process.stdout.write(usage());
    return sub ? 0 : 2;
  }
  const cmd = COMMANDS[sub];
  if (!cmd) {
    process.stderr.write(
      `error: unknown subcommand "${sub}"; expected one of: ${Object.keys(COMMANDS).join(', ')}\n`,
    );
    return 2;
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    process.stdout.write(cmd.help + '\n');
    return 0;
  }
  try {
    await cmd.run(rest);
    return 0;
  } catch (e) {
    if (isUserError(e)) {
      process.stderr.write(`error: ${e.message}\n`);
      return 1;
    }
    // A backend that ran out of memory (a WASM trap, an allocation failure) is said in words, never as a stack.
    const oom = asHeapExhaustion(e, { phase: sub });
    if (oom) {
      process.stderr.write(`error: ${oom.message}\n`);
      return 1;
    }
    throw e;
  }
}

main().then(
  (code) => process.exit(code),
  (e) => {
    process.stderr.write(`internal error: ${(e as Error).stack ?? e}\n`);
    process.exit(70);
  },
);
