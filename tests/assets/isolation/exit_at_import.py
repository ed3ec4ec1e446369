"""A user module that ends its process at import (os._exit: no exception, no cleanup)."""

import os

os._exit(int(os.environ.get("FIELDMEM_TEST_CODE", "0")))
