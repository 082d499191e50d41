/**
 * The "tilelang" editor language: Python, plus marks on the %%tilelang magic line and on T.* DSL calls.
 *
 * A code cell whose source starts with `%%tilelang` gets the mime type `text/x-tilelang`, which the
 * editor resolves to this language; the notebook's own mime type changes (a kernel starting, its
 * language info arriving) are undone for such cells, and a cell that stops being one gets the
 * notebook's mime type back.
 */
import { LanguageSupport, syntaxTree } from '@codemirror/language';
import { Range } from '@codemirror/state';
import {
  Decoration,
  DecorationSet,
  EditorView,
  ViewPlugin,
  ViewUpdate
} from '@codemirror/view';
import type { ICellModel } from '@jupyterlab/cells';
import {
  IEditorLanguage,
  IEditorLanguageRegistry
} from '@jupyterlab/codemirror';
import { INotebookTracker, Notebook, NotebookPanel } from '@jupyterlab/notebook';

export const TILELANG_MIME = 'text/x-tilelang';

/** The first line of a %%tilelang cell (leading blank lines are not allowed by IPython either). */
const MAGIC = /^%%tilelang(?=\s|$)/;

/** An option on the magic line: `-k`, `--tune`, `--pass-config` ... */
const OPTION = /(^|\s)(--?[A-Za-z][\w-]*)/g;

/** A TileLang DSL name: `T.gemm`, `T.Kernel`, `T.float16` ... */
const DSL = /\bT\.[A-Za-z_]\w*/g;

/** Syntax nodes whose text is not code. */
const NOT_CODE = new Set(['Comment', 'String', 'FormatString']);

export function isTileLangSource(source: string): boolean {
  return MAGIC.test(source);
}

const magicLine = Decoration.line({ class: 'tb-tl-magic-line' });
const magicName = Decoration.mark({ class: 'tb-tl-magic-name' });
const magicOption = Decoration.mark({ class: 'tb-tl-magic' });
const dslName = Decoration.mark({ class: 'tb-tl-dsl' });

function inCode(view: EditorView, pos: number): boolean {
  for (let node: any = syntaxTree(view.state).resolveInner(pos, 1); node; node = node.parent) {
    if (NOT_CODE.has(node.name)) {
      return false;
    }
  }
  return true;
}

function decorations(view: EditorView): DecorationSet {
  const doc = view.state.doc;
  const marks: Range<Decoration>[] = [];
  const first = doc.line(1);
  const magic = MAGIC.exec(first.text);
  if (magic) {
    marks.push(magicLine.range(first.from));
    marks.push(magicName.range(first.from, first.from + magic[0].length));
    for (const match of first.text.matchAll(OPTION)) {
      const start = first.from + match.index! + match[1].length;
      marks.push(magicOption.range(start, start + match[2].length));
    }
  }
  for (const { from, to } of view.visibleRanges) {
    for (let pos = from; pos <= to; ) {
      const line = doc.lineAt(pos);
      if (line.number > 1 || !magic) {
        for (const match of line.text.matchAll(DSL)) {
          const start = line.from + match.index!;
          if (inCode(view, start)) {
            marks.push(dslName.range(start, start + match[0].length));
          }
        }
      }
      pos = line.to + 1;
    }
  }
  return Decoration.set(marks, true);
}

const tilelangMarks = ViewPlugin.fromClass(
  class {
    decorations: DecorationSet;

    constructor(view: EditorView) {
      this.decorations = decorations(view);
    }

    update(update: ViewUpdate): void {
      if (
        update.docChanged ||
        update.viewportChanged ||
        syntaxTree(update.startState) !== syntaxTree(update.state)
      ) {
        this.decorations = decorations(update.view);
      }
    }
  },
  { decorations: plugin => plugin.decorations }
);

/** The editor marker the browser tests look for: `.cm-editor[data-tilebench-language="tilelang"]`. */
const marker = EditorView.editorAttributes.of({ 'data-tilebench-language': 'tilelang' });

/** The language entry for the registry: the registry's own Python, plus the marks above. */
export function tilelangLanguage(registry: IEditorLanguageRegistry): IEditorLanguage {
  return {
    name: 'tilelang',
    displayName: 'TileLang',
    mime: TILELANG_MIME,
    extensions: [],
    async load(): Promise<LanguageSupport> {
      const python = await registry.getLanguage('python');
      if (!python?.support) {
        throw new Error('tilebench: the editor has no Python language to build TileLang on');
      }
      const base = python.support;
      return new LanguageSupport(base.language, [base.support, tilelangMarks, marker]);
    }
  };
}

/**
 * Keep the tilelang mime type on the %%tilelang cells of every notebook the tracker sees.
 */
export function followTileLangCells(
  tracker: INotebookTracker,
  registry: IEditorLanguageRegistry
): void {
  const watched = new WeakSet<ICellModel>();

  const apply = (notebook: Notebook, cell: ICellModel): void => {
    if (cell.type !== 'code' || cell.isDisposed) {
      return;
    }
    const wanted = isTileLangSource(cell.sharedModel.getSource());
    if (wanted && cell.mimeType !== TILELANG_MIME) {
      // Whoever set the other mime type (the notebook, when a kernel's language info arrives) has the
      // editor loading that language now: switch once it has landed, so that ours lands last.
      void registry
        .getLanguage(cell.mimeType)
        .catch(() => null)
        .then(() =>
          setTimeout(() => {
            if (!cell.isDisposed && isTileLangSource(cell.sharedModel.getSource())) {
              cell.mimeType = TILELANG_MIME;
            }
          })
        );
    } else if (!wanted && cell.mimeType === TILELANG_MIME) {
      cell.mimeType = notebook.codeMimetype;
    }
  };

  const watch = (notebook: Notebook, cell: ICellModel): void => {
    if (cell.type !== 'code' || watched.has(cell)) {
      return;
    }
    watched.add(cell);
    cell.contentChanged.connect(() => apply(notebook, cell));
    cell.mimeTypeChanged.connect(() => apply(notebook, cell));
    apply(notebook, cell);
  };

  const attach = (notebook: Notebook): void => {
    const model = notebook.model;
    if (!model) {
      return;
    }
    for (const cell of model.cells) {
      watch(notebook, cell);
    }
    model.cells.changed.connect((_, change) => {
      for (const cell of change.newValues) {
        watch(notebook, cell);
      }
    });
  };

  tracker.widgetAdded.connect((_, panel: NotebookPanel) => {
    attach(panel.content);
    panel.content.modelChanged.connect(() => attach(panel.content));
  });
}
