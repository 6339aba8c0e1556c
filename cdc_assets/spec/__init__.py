"""Table specs: the typed model, strict YAML loading, and the naming rules derived from them."""

from cdc_assets.spec.load import load_spec, load_spec_text, load_specs
from cdc_assets.spec.models import ColumnSpec, TableSpec

__all__ = ["ColumnSpec", "TableSpec", "load_spec", "load_spec_text", "load_specs"]
