"""The development distribution of cdc-assets: the local stack (``stack``), the demo (``demo``)
and their `cdc-assets` commands (``cli``). Installed by ``make setup`` from ``dev/``; the product
(``cdc_assets``) never imports it (an import-linter contract)."""
