/* global process */
// Loaded with `node --import` by tests that measure a CLI's peak resident memory: at exit, writes the process's
// peak resident set size (getrusage's ru_maxrss, in kilobytes) as the last line of stderr.
process.on('exit', () => {
  process.stderr.write(`\nmaxRSS kB: ${process.resourceUsage().maxRSS}\n`);
});
