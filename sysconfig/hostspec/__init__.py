"""hostspec: load, validate, render and apply the ai-engine host spec.

Lives under sysconfig/ in the source tree (with spec.yaml and its schema) but
is imported as `hostspec`, because a package named `sysconfig` would shadow
the standard-library module.
"""
