// Plain JavaScript, so it runs on whatever Node npm found first on PATH — finding out which is its point. The
// project's scripts are TypeScript run by Node 24 itself (ADR 0001), which the `node` devDependency puts first on
// npm scripts' PATH; when its install script did not run (`npm ci --ignore-scripts`, `ignore-scripts=true` in an
// .npmrc), the system Node runs them instead, and an older one fails on the first `.ts` file with an error that
// does not say why.
const major = Number(process.versions.node.split('.')[0]);
if (major < 24) {
  console.error(
    `This project's scripts need Node 24, but Node ${process.version} (${process.execPath}) is first on PATH. ` +
      'Run `npm ci` with install scripts allowed: the "node" devDependency installs Node 24 for npm scripts.',
  );
  process.exit(1);
}
