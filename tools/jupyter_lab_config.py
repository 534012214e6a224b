"""JupyterLab settings for `make lab`: opening a notebook must not mark it modified.

Why it would: on opening, Lab writes the running kernel's `kernelspec` (display name "Python 3 (ipykernel)") and
`language_info` (with the exact Python version) into the notebook's metadata, and any change marks the tab
modified. The committed notebooks hold neither, because `nbdev_clean` strips `language_info` (machine-specific)
and sets the display name to the kernel name. So the server hands Lab each notebook with the values the kernel
will report, and takes them out again on save (what `nbdev_clean` would do): the tab stays clean on opening, and
a saved notebook's metadata stays as committed.

Used as `jupyter lab --config tools/jupyter_lab_config.py`."""
import sys
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager


def _kernel_meta(name):
    "kernelspec and language_info as the kernel `name` of this environment will report them, or None."
    try:
        from jupyter_client.kernelspec import KernelSpecManager
        spec = KernelSpecManager().get_kernel_spec(name)
    except Exception: return None
    if spec.language.lower() != 'python': return None
    lang = {'name': 'python', 'version': sys.version.split()[0], 'mimetype': 'text/x-python',
            'codemirror_mode': {'name': 'ipython', 'version': sys.version_info[0]},
            'pygments_lexer': f'ipython{sys.version_info[0]}', 'nbconvert_exporter': 'python', 'file_extension': '.py'}
    return {'name': name, 'display_name': spec.display_name, 'language': spec.language}, lang


class NbdevCleanContents(AsyncLargeFileManager):
    "Notebooks go to Lab with the kernel's own metadata filled in, and come back nbdev-clean."
    async def get(self, path, content=True, type=None, format=None, **kw):
        model = await super().get(path, content=content, type=type, format=format, **kw)
        if content and model.get('type') == 'notebook' and model.get('content'):
            md = model['content'].get('metadata', {})
            ks = md.get('kernelspec') or {}
            got = _kernel_meta(ks.get('name', 'python3')) if 'language_info' not in md else None
            if got:
                md['kernelspec'], md['language_info'] = got
        return model


def _clean_on_save(model, **kw):
    "Take out what `get` put in: nbdev_clean's notebook metadata (no language_info, display name = kernel name)."
    if model.get('type') != 'notebook' or not model.get('content'): return
    md = model['content'].get('metadata', {})
    md.pop('language_info', None)
    if (md.get('kernelspec') or {}).get('name'): md['kernelspec']['display_name'] = md['kernelspec']['name']


c = get_config()  # noqa: F821 (provided by Jupyter when it loads this file)
c.ServerApp.contents_manager_class = NbdevCleanContents
c.ContentsManager.pre_save_hook = _clean_on_save
