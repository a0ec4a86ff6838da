# expect: arg-type
# n_step_returns' window length is an int: a float is caught before the call.
import numpy as np

import puffadv

x = np.zeros((4, 8), np.float32)
puffadv.n_step_returns(x, x, x > 0, n=2.5, last_value=x[:, 0], time_axis=-1)
