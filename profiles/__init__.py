"""The serving profiles shipped with ascendctl: data, one YAML file per profile.

They live at the top of the repository, where people look for them; the build packages this
folder as `engine.profiles.shipped` (pyproject.toml), so a source checkout, an editable install
and a wheel all find them through `importlib.resources`.
"""
