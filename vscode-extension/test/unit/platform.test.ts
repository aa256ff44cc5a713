import assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';

import { JobsModel } from '../../src/model';
import { unsupportedPlatform, warnIfUnsupported } from '../../src/platform';
import { mock } from './vscode-mock';

beforeEach(() => mock.reset());

test('native Windows only: WSL and Remote-SSH windows (remoteName) and other systems are fine', () => {
  assert.match(unsupportedPlatform('win32', undefined)!, /does not run on Windows itself \(it needs fcntl\)\. Use WSL or Remote-SSH/);
  assert.equal(unsupportedPlatform('win32', 'wsl'), undefined);
  assert.equal(unsupportedPlatform('win32', 'ssh-remote'), undefined);
  assert.equal(unsupportedPlatform('linux', undefined), undefined);
  assert.equal(unsupportedPlatform('darwin', undefined), undefined);
});

test('said once, and the Jobs view says it instead of the CLI error', () => {
  const model = new JobsModel();
  const message = unsupportedPlatform('win32', undefined)!;
  const disposables = warnIfUnsupported(model, message);
  assert.equal(mock.messages('showWarningMessage').length, 1);
  model.setError("ModuleNotFoundError: No module named 'fcntl'");
  assert.equal(model.error, message);
  model.setError('again');
  assert.equal(model.error, message);
  assert.equal(mock.messages('showWarningMessage').length, 1, 'once');
  disposables.forEach((d) => d.dispose());
  assert.deepEqual(warnIfUnsupported(new JobsModel(), undefined), [], 'a supported platform: nothing');
});
