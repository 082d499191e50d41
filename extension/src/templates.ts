/**
 * Kernel templates: a command each (`tilebench:insert-<name>`) in the palette, and launcher items
 * that open a new notebook with the template. The texts come from the server (tilebench/lab/templates.py).
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { ITemplate, tilebenchIcon } from './api';

const LOAD_EXT = '%load_ext tilebench';
const LOADED = /^\s*%load_ext\s+tilebench\b/m;
const CATEGORY = 'TileLang';

export function templateCommand(name: string): string {
  return `tilebench:insert-${name}`;
}

/**
 * Put the template in a cell below the active one (reusing the active cell if it is an empty code
 * cell), with a `%load_ext tilebench` cell before it unless the notebook has one.
 */
export function insertTemplate(panel: NotebookPanel, source: string): void {
  const notebook = panel.content;
  const model = notebook.model;
  if (!model) {
    return;
  }
  const texts = [source];
  if (!Array.from(model.cells).some(cell => LOADED.test(cell.sharedModel.getSource()))) {
    texts.unshift(LOAD_EXT);
  }
  let index = notebook.activeCellIndex; // each text goes in below this one
  const active = notebook.activeCell;
  const reuse = active?.model.type === 'code' && active.model.sharedModel.getSource().trim() === '';
  texts.forEach((text, i) => {
    if (i === 0 && reuse) {
      active!.model.sharedModel.setSource(text);
      return;
    }
    index += 1;
    model.sharedModel.insertCell(index, { cell_type: 'code', source: text, metadata: {} });
  });
  notebook.activeCellIndex = index;
  notebook.mode = 'command';
}

export function addTemplateCommands(
  app: JupyterFrontEnd,
  tracker: INotebookTracker,
  templates: ITemplate[],
  palette: ICommandPalette | null,
  launcher: ILauncher | null
): void {
  templates.forEach((template, rank) => {
    const id = templateCommand(template.name);
    app.commands.addCommand(id, {
      label: args =>
        args.newNotebook ? template.title : `Insert TileLang Template: ${template.title}`,
      caption: template.description,
      icon: args => (args.newNotebook ? tilebenchIcon : undefined),
      execute: async args => {
        let panel = tracker.currentWidget;
        if (args.newNotebook || !panel) {
          panel = (await app.commands.execute('notebook:create-new', {
            cwd: (args.cwd as string) ?? '',
            kernelName: app.serviceManager.kernelspecs.specs?.default
          })) as NotebookPanel;
        }
        await panel.context.ready;
        insertTemplate(panel, template.source);
        app.shell.activateById(panel.id);
        return panel.context.path;
      }
    });
    palette?.addItem({ command: id, category: CATEGORY });
    launcher?.add({ command: id, args: { newNotebook: true }, category: CATEGORY, rank });
  });
}
