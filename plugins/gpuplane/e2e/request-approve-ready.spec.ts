import { expect, test, type Browser, type Page } from '@playwright/test';

// bob (owner of team-a) asks for a virtual cluster, alice (platform admin)
// approves it in her inbox, bob watches it become READY: every step through
// the plugin in a real browser, every call to the real API of dev mode, and
// every sign-in through the dev issuer's real login page (authorization code
// + PKCE in the browser). Screenshots go to e2e-artifacts/.

const shot = (page: Page, name: string) =>
  page.screenshot({ path: `e2e-artifacts/${name}.png`, fullPage: true });

/** A new browser session signed in as user through the issuer's login page. */
async function signIn(browser: Browser, user: string, path = '/gpuplane'): Promise<Page> {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(path);
  // The plugin asks for the user's ID token; with none, the dev app sends
  // the browser to the issuer.
  await page.waitForURL(/\/login\?authRequestID=/);
  await expect(page.getByRole('heading', { name: 'Sign in' })).toBeVisible();
  await page.getByLabel('Username').fill(user);
  await page.getByLabel('Password').fill(user);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL(url => url.pathname === path);
  await expect(page.getByTestId('whoami')).toContainText(`${user}@example.com`);
  return page;
}

const vc = `e2e-${Date.now().toString(36)}`;

test('bob requests a virtual cluster, alice approves it, bob sees it READY', async ({ browser }) => {
  const bob = await signIn(browser, 'bob');
  await expect(bob.getByTestId('whoami')).toContainText('team-a: OWNER');

  await test.step('bob fills the request form; the live fit check answers as he types', async () => {
    await bob.getByRole('tab', { name: 'New request' }).click();
    const id = bob.getByLabel('Virtual cluster id');
    // A bad id: the API's field violation appears under the id field.
    await id.fill('Not_A_Label');
    await expect(bob.locator('#gpuplane-virtualClusterId-helper-text')).toContainText(/DNS|label|lower/i);
    await id.fill(vc);
    await expect(bob.locator('#gpuplane-virtualClusterId-helper-text')).toHaveCount(0);
    await bob.getByLabel('GPUs', { exact: true }).fill('1');
    await bob.getByLabel('CPU cores').fill('4');
    await bob.getByLabel('Memory (GiB)').fill('16');
    await bob.getByLabel('Justification').fill('vision model fine-tuning (browser test)');
    await expect(bob.getByTestId('fit-result')).toContainText('Fits');

    // Too much for team-a (4 GPUs): the fit check names the shortfall.
    await bob.getByLabel('GPUs', { exact: true }).fill('7');
    await expect(bob.getByTestId('fit-result')).toContainText('Does not fit');
    await bob.getByLabel('GPUs', { exact: true }).fill('1');
    await expect(bob.getByTestId('fit-result')).toContainText('Fits');
    await shot(bob, '01-bob-request-fits');

    await bob.getByRole('button', { name: 'Request virtual cluster' }).click();
    await expect(bob.getByTestId('request-created')).toContainText(`new virtual cluster ${vc}`);
    await expect(bob.getByTestId('request-created')).toContainText('PENDING');
    await shot(bob, '02-bob-request-created');
  });

  await test.step('the request waits in bob’s history', async () => {
    await bob.getByRole('tab', { name: 'Request history' }).click();
    const row = bob.locator('tr', { hasText: `new virtual cluster ${vc}` });
    await expect(row.getByTestId('request-state')).toHaveText('PENDING');
  });

  const alice = await signIn(browser, 'alice');
  await test.step('alice approves it in her inbox, with a reason', async () => {
    await alice.getByRole('tab', { name: 'Approval inbox' }).click();
    const card = alice.locator('[data-testid^="pending-"]', { hasText: `new virtual cluster ${vc}` });
    await expect(card).toContainText('teams/team-a');
    await expect(card.getByTestId('fit-result')).toContainText('Fits');
    await card.getByRole('textbox').fill('ok for the browser test');
    await shot(alice, '03-alice-inbox');
    await card.getByRole('button', { name: 'Approve' }).click();
    const decided = alice.locator('[data-testid^="decided-"]', { hasText: vc });
    await expect(decided).toContainText(/APPROVED|APPLIED/);
    await expect(decided).toContainText('ok for the browser test');
    await shot(alice, '04-alice-approved');
  });

  await test.step('bob sees the virtual cluster provisioned and READY', async () => {
    await bob.getByRole('tab', { name: 'Virtual clusters' }).click();
    const row = bob.getByTestId(`vc-${vc}`);
    await expect(row.getByTestId('phase')).toHaveText('READY', { timeout: 120_000 });
    for (const c of ['NamespaceReady', 'QueuesReady', 'ReleaseDeployed', 'ControlPlaneReady', 'KubeconfigReady']) {
      await expect(row.getByTestId(`condition-${c}`)).toContainText('✓');
    }
    await expect(row).toContainText('GPU: 0 GPU allocated of 1 GPU');
    await shot(bob, '05-bob-ready');
  });

  await test.step('bob downloads his kubeconfig with the gpuplanectl instructions', async () => {
    await bob.getByTestId(`vc-${vc}`).getByRole('button', { name: 'Kubeconfig' }).click();
    const dialog = bob.getByRole('dialog');
    await expect(dialog.getByTestId('gpuplanectl-instructions')).toContainText(`gpuplanectl kubeconfig ${vc} --merge`);
    const [download] = await Promise.all([
      bob.waitForEvent('download'),
      dialog.getByRole('button', { name: `Download ${vc}.kubeconfig` }).click(),
    ]);
    expect(download.suggestedFilename()).toBe(`${vc}.kubeconfig`);
    const stream = await download.createReadStream();
    let text = '';
    for await (const chunk of stream) text += chunk.toString();
    expect(text).toContain('kind: Config');
    expect(text).toContain('gpuplanectl');
    await shot(bob, '06-bob-kubeconfig');
    await dialog.getByRole('button', { name: 'Close' }).click();
  });

  await test.step('the history and the audit trail record it', async () => {
    await bob.getByRole('tab', { name: 'Request history' }).click();
    const row = bob.locator('tr', { hasText: `new virtual cluster ${vc}` });
    await expect(row.getByTestId('request-state')).toHaveText(/APPROVED|APPLIED/);
    await expect(row).toContainText('ok for the browser test');
    await bob.getByRole('tab', { name: 'Audit trail' }).click();
    await expect(bob.getByTestId('audit-event').first()).toBeVisible();
    await expect(bob.locator('table[aria-label="audit trail"]')).toContainText('ApproveRequest');
  });

  await test.step('the Group entity tab shows the same team', async () => {
    await bob.goto('/entity-demo');
    await expect(bob.getByTestId(`vc-${vc}`).getByTestId('phase')).toHaveText('READY');
    await shot(bob, '07-entity-tab');
  });
});

test('errors show their reason: carol (member, not owner) may not ask', async ({ browser }) => {
  const carol = await signIn(browser, 'carol');
  await carol.getByRole('tab', { name: 'New request' }).click();
  await carol.getByLabel('Virtual cluster id').fill(`${vc}-carol`);
  await carol.getByRole('button', { name: 'Request virtual cluster' }).click();
  const error = carol.getByTestId('gpuplane-error').filter({ hasText: 'The request was not created' });
  await expect(error).toContainText('PERMISSION_DENIED');
  await expect(error).toContainText('owners of teams/team-a');
  await expect(carol.getByRole('tab', { name: 'Approval inbox' })).toHaveCount(0);
  await shot(carol, '08-carol-permission-denied');
});
