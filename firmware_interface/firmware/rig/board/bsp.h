/* Board support a board port of the rig firmware needs (docs/firmware.md, "The board port"): what the vendor's
 * SDK provides on a Cortex-M4F/M7 board (Teensy 4.x, STM32F4). bsp_stub.c is a stand-in with no hardware, so the
 * port compiles and links anywhere; a real board replaces it with calls into its SDK. */
#ifndef BSP_H
#define BSP_H

#include <stddef.h>
#include <stdint.h>

void bsp_init(uint32_t baud);                      /* clocks, the UART at baud, PWM timers, ADCs, the e-stop GPIO */
uint32_t bsp_micros(void);                         /* free-running 32-bit µs timer */
int bsp_uart_getc(void);                           /* next received byte, or -1 (from the RX interrupt's ring) */
void bsp_uart_kick(void);                          /* start the transmit DMA on the ring if it is idle */
void bsp_pwm_write_us(uint8_t channel, float pulse_us);  /* a hobby servo's pulse width */
float bsp_servo_feedback(uint8_t channel);         /* measured position (feedback potentiometer), raw unit */
int32_t bsp_adc_read(uint8_t channel);             /* a strain-gauge / load-cell bridge ADC, signed counts */
int bsp_estop_pressed(void);                       /* the e-stop button's GPIO, debounced */
void bsp_idle(uint32_t max_us);                    /* sleep until an interrupt or max_us (WFI) */

#endif
