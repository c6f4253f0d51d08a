import { defineConfig } from '@playwright/test';

// The browser test runs against a running gpuplane dev mode (make
// test-portal starts one on free ports and passes them in) and starts the
// plugin's dev app itself. Debian's chromium is the browser: Playwright's own
// browser builds are not used.
const appPort = Number(process.env.PORTAL_APP_PORT ?? 3000);
const apiUrl = process.env.GPUPLANE_API_URL ?? 'http://localhost:8080';
const issuerUrl = process.env.GPUPLANE_ISSUER_URL ?? 'http://127.0.0.1:5556';

export default defineConfig({
  testDir: 'e2e',
  outputDir: 'test-results',
  timeout: 240_000,
  expect: { timeout: 30_000 },
  workers: 1,
  retries: 0,
  forbidOnly: true,
  reporter: [['list']],
  use: {
    baseURL: `http://localhost:${appPort}`,
    viewport: { width: 1440, height: 1000 },
    acceptDownloads: true,
    trace: 'retain-on-failure',
    screenshot: 'only-on-failure',
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'],
    },
  },
  webServer: {
    command: '../../node_modules/.bin/backstage-cli package start --config dev/app-config.yaml',
    url: `http://localhost:${appPort}`,
    reuseExistingServer: process.env.PORTAL_REUSE_APP === '1',
    timeout: 240_000,
    stdout: 'ignore',
    stderr: 'pipe',
    env: {
      APP_CONFIG_app_baseUrl: `http://localhost:${appPort}`,
      APP_CONFIG_gpuplane_baseUrl: apiUrl,
      APP_CONFIG_gpuplane_devAuth_issuerUrl: issuerUrl,
      BROWSER: 'none',
    },
  },
});
