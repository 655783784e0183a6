"""Container images built with no registry: ``agn:dev`` (:mod:`xtask.images.agn_image`, its
recipes in :mod:`xtask.images.recipes`) and the kind node image (:mod:`xtask.images.nodeimage`,
written as archives by :mod:`xtask.images.archive`).

Only the kind runtime and the build scripts use this package; nothing here knows about
environments or runtimes.
"""
