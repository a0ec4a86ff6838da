# expect: call-overload
# A misspelt keyword argument (gama) is caught before the code runs (compute_puff_advantage
# is overloaded on its fused outputs, so mypy reports it as no matching overload).
import numpy as np

import puffadv

x = np.zeros((4, 8), np.float32)
puffadv.compute_puff_advantage(x, x, x, x, gama=0.99)
