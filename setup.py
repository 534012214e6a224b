"""Packaging for posenc_nb, driven by settings.ini (nbdev 2 layout), without pkg_resources."""
from configparser import ConfigParser
import setuptools

cfg = ConfigParser(delimiters=['='])
cfg.read('settings.ini', encoding='utf-8')
cfg = cfg['DEFAULT']

licenses = {'apache2': ('Apache Software License 2.0', 'OSI Approved :: Apache Software License')}
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable']
lic = licenses[cfg['license']]
requirements = cfg.get('requirements', '').split()
# every `<name>_requirements` key is the extra `posenc_nb[<name>]` (core install: `requirements` only); `all` is their union
NOT_EXTRAS = ('requirements', 'pip_requirements', 'conda_requirements')
extras = {k[:-len('_requirements')]: cfg[k].split() for k in cfg if k.endswith('_requirements') and k not in NOT_EXTRAS}
extras['all'] = sorted({r for reqs in extras.values() for r in reqs})
scripts = [s.strip() for s in cfg.get('console_scripts', '').split('\n') if s.strip()]

with open('README.md', encoding='utf-8') as f: long_description = f.read()

setuptools.setup(
    name=cfg['lib_name'], version=cfg['version'], license=lic[0],
    description=cfg['description'], long_description=long_description, long_description_content_type='text/markdown',
    author=cfg['author'], author_email=cfg['author_email'], keywords=cfg['keywords'].split(),
    url=cfg['git_url'], packages=setuptools.find_packages(include=[cfg['lib_path'], cfg['lib_path'] + '.*']),
    include_package_data=True, package_data={cfg['lib_path']: ['py.typed']}, install_requires=requirements,
    extras_require=extras,
    python_requires='>=' + cfg['min_python'], zip_safe=False,
    entry_points={'console_scripts': scripts, 'nbdev': [f"{cfg['lib_path']}={cfg['lib_path']}._modidx:d"]},
    classifiers=['Development Status :: ' + statuses[int(cfg['status'])], 'Intended Audience :: ' + cfg['audience'].title(),
                 'License :: ' + lic[1], 'Natural Language :: ' + cfg['language'].title(),
                 'Programming Language :: Python :: 3'],
)
