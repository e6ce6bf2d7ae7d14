#include "device/device.h"

#include <string.h>

#include "base/error.h"
#include "base/mem.h"

const td_device_ops *td_cpu_device_ops(void);

static const struct {
  const char *name;
  const td_device_ops *(*ops)(void);
} k_backends[] = {
    {"cpu", td_cpu_device_ops},
};

td_device *td_device_open(const char *name) {
  for (size_t i = 0; i < sizeof k_backends / sizeof *k_backends; i++) {
    if (strcmp(name, k_backends[i].name) == 0) {
      td_device *d = td_calloc(sizeof *d);
      d->ops = k_backends[i].ops();
      return d;
    }
  }
  td_fail("unknown device '%s'; known devices: cpu", name);
}

void td_device_close(td_device *d) { td_free(d); }
