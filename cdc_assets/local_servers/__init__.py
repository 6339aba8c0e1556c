"""What the product knows of a local stack: its state file (``state``), and the addresses of the
servers it records there (``endpoints``). The stack (``dev/cdc_assets_dev/stack``) starts the
servers and
writes the file; the product's resources only read it, so no product module imports the stack."""
