/* engine/options.h — parsing coil_options fields. */
#ifndef COIL_ENGINE_OPTIONS_H
#define COIL_ENGINE_OPTIONS_H


int engine_parse_compression(const char *spec, int *level);

#endif
