"""The inspect stage's pages and the benchmark's: report.html and its parts (inspect/),
benchmark.md and its charts (benchmark/), the graph picture and charts (pictures/), one
Jinja2 environment (templating) and the index across a project's models (models_index).
Enter by inspect/ for the report."""
