// The op interface has no code of its own; this unit anchors the library.
#include "kernels/api/ops.h"
