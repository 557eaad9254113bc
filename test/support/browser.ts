/**
 * How the browser tests launch Debian's Chromium through playwright-core: headless, no sandbox (containers), no
 * GPU, and no background traffic (the machine has no internet). `CHROMIUM_PATH` points elsewhere if needed.
 */
export const CHROMIUM_LAUNCH = {
  executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
};
