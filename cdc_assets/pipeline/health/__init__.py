"""The measurements behind the asset checks and the fleet metrics: plain values for
``cdc_assets.quality`` to judge."""
