"""A pipeline's results site: static HTML pages (nights grid, test health, performance, cost and
time, alerts) and the night results as JSON, built from the warehouse into the artefact store
after each night's summary and served beside the artefacts (``nightly serve``)."""
