/* KeyParser: an eager kernel's parse_cache_key for the common call, in C.
 *
 * parse(t0, t1, ...) with exactly `nargs` positional arguments and no keywords returns
 * prefix + (t_i.shape[axis] or t_i.stride(axis), ...); any other call, or any error while reading
 * the tensors, goes to `slow(*args, **kwargs)`, which binds the call properly and names what is wrong.
 * The Python fallback (binder.make_key_parser) computes the same tuple.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

#define KEYPARSE_VERSION 1
#define MAX_ARGS 64

typedef struct {
    Py_ssize_t arg;   /* index among the positional arguments */
    int stride;       /* 0: shape[axis]; 1: stride(axis) */
    Py_ssize_t axis;
} Read;

typedef struct {
    PyObject_HEAD
    Py_ssize_t nargs;
    PyObject *prefix; /* tuple: the template's compile-time values */
    PyObject *slow;   /* callable for every other call */
    PyObject *dict;   /* __dict__, so a __doc__ can be set */
    Py_ssize_t nreads;
    Read *reads;
    vectorcallfunc vectorcall;
} KeyParser;

static PyObject *shape_name, *stride_name;

static PyObject *call_slow(KeyParser *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static PyObject *call_uninitialised(PyObject *callable, PyObject *const *args, size_t nargsf,
                                    PyObject *kwnames) {
    PyErr_SetString(PyExc_TypeError, "KeyParser: called before __init__");
    return NULL;
}

static PyObject *keyparser_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                      PyObject *kwnames) {
    KeyParser *self = (KeyParser *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != self->nargs || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        return call_slow(self, args, nargsf, kwnames);
    }
    Py_ssize_t nprefix = PyTuple_GET_SIZE(self->prefix);
    PyObject *key = PyTuple_New(nprefix + self->nreads);
    if (key == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nprefix; i++) {
        PyObject *item = PyTuple_GET_ITEM(self->prefix, i);
        Py_INCREF(item);
        PyTuple_SET_ITEM(key, i, item);
    }
    PyObject *shapes[MAX_ARGS] = {NULL}; /* each tensor's shape, read once */
    for (Py_ssize_t r = 0; r < self->nreads; r++) {
        Read *read = &self->reads[r];
        PyObject *value;
        if (read->stride) {
            PyObject *axis = PyLong_FromSsize_t(read->axis);
            value = axis ? PyObject_CallMethodOneArg(args[read->arg], stride_name, axis) : NULL;
            Py_XDECREF(axis);
        } else {
            PyObject *shape = shapes[read->arg];
            if (shape == NULL) {
                shape = shapes[read->arg] = PyObject_GetAttr(args[read->arg], shape_name);
            }
            if (shape == NULL) {
                value = NULL;
            } else if (PyTuple_Check(shape) && read->axis < PyTuple_GET_SIZE(shape)) {
                value = PyTuple_GET_ITEM(shape, read->axis);
                Py_INCREF(value);
            } else {
                value = PySequence_GetItem(shape, read->axis);
            }
        }
        if (value == NULL) {
            goto slow_path;
        }
        PyTuple_SET_ITEM(key, nprefix + r, value);
    }
    for (Py_ssize_t a = 0; a < self->nargs; a++) {
        Py_XDECREF(shapes[a]);
    }
    return key;

slow_path:
    for (Py_ssize_t a = 0; a < self->nargs; a++) {
        Py_XDECREF(shapes[a]);
    }
    Py_DECREF(key);
    if (!PyErr_ExceptionMatches(PyExc_Exception)) {
        return NULL; /* KeyboardInterrupt and the like go up */
    }
    PyErr_Clear();
    return call_slow(self, args, nargsf, kwnames);
}

static int keyparser_init(KeyParser *self, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"nargs", "prefix", "reads", "slow", NULL};
    Py_ssize_t nargs;
    PyObject *prefix, *reads, *slow;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "nO!OO:KeyParser", keywords, &nargs, &PyTuple_Type,
                                     &prefix, &reads, &slow)) {
        return -1;
    }
    if (self->reads != NULL) {
        PyErr_SetString(PyExc_TypeError, "KeyParser is initialised once");
        return -1;
    }
    if (nargs < 0 || nargs > MAX_ARGS) {
        PyErr_Format(PyExc_ValueError, "KeyParser: nargs must be 0..%d, not %zd", MAX_ARGS, nargs);
        return -1;
    }
    if (!PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "KeyParser: slow must be callable");
        return -1;
    }
    PyObject *seq = PySequence_Fast(reads, "KeyParser: reads must be a sequence of (arg, stride, axis)");
    if (seq == NULL) {
        return -1;
    }
    Py_ssize_t nreads = PySequence_Fast_GET_SIZE(seq);
    self->reads = PyMem_Calloc(nreads ? nreads : 1, sizeof(Read));
    if (self->reads == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t r = 0; r < nreads; r++) {
        Read *read = &self->reads[r];
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, r), "npn:KeyParser read", &read->arg,
                              &read->stride, &read->axis)) {
            Py_DECREF(seq);
            return -1;
        }
        if (read->arg < 0 || read->arg >= nargs || read->axis < 0) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "KeyParser: read %zd is out of range", r);
            return -1;
        }
    }
    Py_DECREF(seq);
    self->nreads = nreads;
    self->nargs = nargs;
    Py_INCREF(prefix);
    Py_XSETREF(self->prefix, prefix);
    Py_INCREF(slow);
    Py_XSETREF(self->slow, slow);
    self->vectorcall = keyparser_vectorcall;
    return 0;
}

static PyObject *keyparser_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    KeyParser *self = (KeyParser *)type->tp_alloc(type, 0);
    if (self != NULL) {
        self->vectorcall = call_uninitialised;
    }
    return (PyObject *)self;
}

static int keyparser_traverse(KeyParser *self, visitproc visit, void *arg) {
    Py_VISIT(self->prefix);
    Py_VISIT(self->slow);
    Py_VISIT(self->dict);
    return 0;
}

static int keyparser_clear(KeyParser *self) {
    Py_CLEAR(self->prefix);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->dict);
    return 0;
}

static void keyparser_dealloc(KeyParser *self) {
    PyObject_GC_UnTrack(self);
    keyparser_clear(self);
    PyMem_Free(self->reads);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *keyparser_get_slow(KeyParser *self, void *closure) {
    if (self->slow == NULL) {
        Py_RETURN_NONE;
    }
    Py_INCREF(self->slow);
    return self->slow;
}

static PyGetSetDef keyparser_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {"slow", (getter)keyparser_get_slow, NULL, "the Python parser every other call goes to", NULL},
    {NULL},
};

static PyTypeObject KeyParserType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tilebench.kernel._keyparse.KeyParser",
    .tp_doc = "KeyParser(nargs, prefix, reads, slow): parse_cache_key for calls of nargs tensors.",
    .tp_basicsize = sizeof(KeyParser),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = keyparser_new,
    .tp_init = (initproc)keyparser_init,
    .tp_dealloc = (destructor)keyparser_dealloc,
    .tp_traverse = (traverseproc)keyparser_traverse,
    .tp_clear = (inquiry)keyparser_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(KeyParser, vectorcall),
    .tp_dictoffset = offsetof(KeyParser, dict),
    .tp_getset = keyparser_getset,
};

static struct PyModuleDef keyparse_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tilebench.kernel._keyparse",
    .m_doc = "parse_cache_key's common case in C (see tilebench/kernel/native.py).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__keyparse(void) {
    shape_name = PyUnicode_InternFromString("shape");
    stride_name = PyUnicode_InternFromString("stride");
    if (shape_name == NULL || stride_name == NULL || PyType_Ready(&KeyParserType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&keyparse_module);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&KeyParserType);
    if (PyModule_AddObject(module, "KeyParser", (PyObject *)&KeyParserType) < 0 ||
        PyModule_AddIntConstant(module, "VERSION", KEYPARSE_VERSION) < 0) {
        Py_DECREF(&KeyParserType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
