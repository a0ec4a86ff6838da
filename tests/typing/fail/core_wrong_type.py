# expect: arg-type
# _core.pyi types the compiled functions: a str where a bool goes is caught.
from puffadv import _core

_core.pin_cpu_thread_count("yes")
