# Torch operator library: PUFF_TORCH=AUTO|ON|OFF.
# (Placeholder until the operator library lands: AUTO and OFF build without it.)
set(PUFF_HAS_TORCH 0)
if(PUFF_TORCH STREQUAL "ON")
  message(FATAL_ERROR "PUFF_TORCH=ON: the torch operator library is not part of this build yet")
endif()
