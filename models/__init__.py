"""This repository's own models, beside the bundled ones in pipeline/zoo/ (the package's,
which an installed trt-pipeline carries). Not installed: a model of a repository lives in
that repository, named by model.factory."""
