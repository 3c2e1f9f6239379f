/* engine/io/write.h — engine_write: encode (pool or inline), take the
 * object's turn for a ticket, place, send, apply in ticket order. */
#ifndef COIL_ENGINE_WRITE_H
#define COIL_ENGINE_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "coil.h"

struct coil_obj;

int engine_write(struct coil_obj *h, const void *buf, size_t len, uint64_t off,
		 coil_cb cb, void *arg);

#endif
