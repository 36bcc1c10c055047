"""`trt-pipeline init` and `trt-pipeline add-model`: a repository set up for the pipeline.
project writes the scaffolding (dvc.yaml, conf/config.yaml, params.yaml, the data folders)
and adds a model; several holds the files of a project of several models; convert turns a
one-model project into one of several, keeping the user's comments; ci writes the CI that
builds in the pinned image (`init --ci`). The templates they write from are in files/.
Enter by project."""
