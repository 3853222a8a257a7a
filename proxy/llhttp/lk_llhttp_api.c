/* Compiles llhttp's api.c from --with-llhttp=DIR (Debian node-llhttp). */
#include <api.c>
