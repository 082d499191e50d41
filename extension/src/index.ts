/**
 * tilebench's JupyterLab extension: the %%tilelang editor language, kernel templates (palette and
 * launcher) and the "Tuning runs" sidebar. The server side lives in tilebench/lab/.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { IEditorLanguageRegistry } from '@jupyterlab/codemirror';
import { ILauncher } from '@jupyterlab/launcher';
import { INotebookTracker } from '@jupyterlab/notebook';

import { ITemplate, requestAPI } from './api';
import { followTileLangCells, tilelangLanguage } from './language';
import { RUNS_PANEL_ID, RunsPanel } from './sidebar';
import { addTemplateCommands } from './templates';

const language: JupyterFrontEndPlugin<void> = {
  id: 'tilebench:language',
  description: 'The tilelang editor language for %%tilelang cells.',
  autoStart: true,
  requires: [IEditorLanguageRegistry, INotebookTracker],
  activate: (_app: JupyterFrontEnd, registry: IEditorLanguageRegistry, tracker: INotebookTracker) => {
    registry.addLanguage(tilelangLanguage(registry));
    followTileLangCells(tracker, registry);
  }
};

const templates: JupyterFrontEndPlugin<void> = {
  id: 'tilebench:templates',
  description: 'TileLang kernel templates in the command palette and the launcher.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICommandPalette, ILauncher],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    palette: ICommandPalette | null,
    launcher: ILauncher | null
  ) => {
    // Not awaited: the app starts without waiting for the server; the commands appear when it answers.
    requestAPI<ITemplate[]>('templates')
      .then(list => addTemplateCommands(app, tracker, list, palette, launcher))
      .catch(error => console.error('tilebench: could not load the kernel templates', error));
  }
};

const runs: JupyterFrontEndPlugin<void> = {
  id: 'tilebench:runs',
  description: 'The "Tuning runs" sidebar.',
  autoStart: true,
  optional: [ILayoutRestorer, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null
  ) => {
    const panel = new RunsPanel();
    app.shell.add(panel, 'left', { rank: 600 });
    restorer?.add(panel, RUNS_PANEL_ID);
    app.commands.addCommand('tilebench:show-runs', {
      label: 'Show Tuning Runs',
      execute: () => {
        app.shell.activateById(RUNS_PANEL_ID);
        return panel.refresh();
      }
    });
    palette?.addItem({ command: 'tilebench:show-runs', category: 'TileLang' });
  }
};

export default [language, templates, runs];
